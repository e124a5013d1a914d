"""The ``servesim`` command: plugins listing, validate, run delegation, and the error edge
(one ``servesim: error:`` line, exit status 2, no traceback)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import servesim.cli.main as cli
from servesim.hookspecs import HOOK_KINDS

TOY = """
engine:
  backend: toy
  toy: {max_running: 2}
  timing_model: {type: toy_constant, pass_ms: 2.5}
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sim.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def assert_user_error(capsys: pytest.CaptureFixture[str], rc: int, expected_start: str) -> str:
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert err.startswith(f"servesim: error: {expected_start}")
    assert "Traceback" not in err
    assert err.count("\n") == 1  # exactly one line
    return err


def test_plugins_table_lists_every_kind_and_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for kind in HOOK_KINDS.values():
        assert f"{kind}:" in lines
    version = importlib.metadata.version("servesim-toy")
    backend_rows = lines[lines.index("backend:") + 1 : lines.index("timing_model:")]
    assert ["toy", "plugin", "toy", "(servesim-toy", f"{version})"] in [row.split() for row in backend_rows]
    assert any(line.split()[:3] == ["lru", "plugin", "servesim.builtins.kv"] for line in lines)
    assert (f"  toy  (servesim-toy {version}): add_commands, pass_completed, register_backends, "
            "register_kv_event_sinks, register_routers, register_timing_models, register_trace_formats, "
            "report_extra, run_started") in lines


def test_plugins_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["kinds"]) == list(HOOK_KINDS.values())
    toy_version = importlib.metadata.version("servesim-toy")
    assert {"name": "toy", "plugin": "toy", "distribution": "servesim-toy", "version": toy_version} in data[
        "kinds"
    ]["backend"]
    lru = next(e for e in data["kinds"]["eviction_policy"] if e["name"] == "lru")
    assert (lru["plugin"], lru["distribution"]) == ("servesim.builtins.kv", "servesim")
    names = [p["name"] for p in data["plugins"]]
    assert names == sorted(names) and {"toy", "vllm", "sglang", "trtllm", "servesim.builtins.kv"} <= set(
        names
    )


def test_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, TOY)
    assert cli.main(["validate", path, "--set", "cluster.workers=3"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        f"OK: {path}: backend toy (block_size 16, dp_size 1), timing toy_constant, eviction lru, 3 workers, "
        "router round_robin, workload synthetic\n"
    )


@pytest.mark.parametrize(
    ("text", "sets", "expected"),
    [
        (
            "engine: {max_num_seqz: 4}",
            [],
            "{file}: engine.max_num_seqz: unknown key (did you mean 'max_num_seqs'?)",
        ),
        ("engine: {max_num_seqs: x}", [], "{file}: engine.max_num_seqs: expected an integer, got 'x'"),
        (
            "engine: {preemption_mode: x}",
            [],
            "{file}: engine.preemption_mode: expected one of 'lifo', 'fifo'",
        ),
        (
            "engine: {scheduling_policy: lifo}",
            [],
            "{file}: engine.scheduling_policy: expected one of 'fcfs', 'priority', got 'lifo'",
        ),
        (
            "engine: {backend: trtllm, scheduling_policy: priority}",
            [],
            "{file}: engine.scheduling_policy: priority is modelled for the vllm backend only",
        ),
        (
            "engine: {backend: vllm, scheduling_policy: priority, kv_bytes_per_token: 1000, "
            "native_host_offload: {num_host_blocks: 100}}",
            [],
            "{file}: engine.scheduling_policy: priority is not modelled with "
            "engine.native_host_offload; use fcfs",
        ),
        ("engine: {dp_size: -1}", [], "{file}: engine.dp_size: expected an integer >= 1, got -1"),
        ("engine: {backend: nope}", [], "{file}: engine.backend: unknown backend 'nope'; installed: "),
        (
            "{}",
            ["engine.timing_model.type=nope"],
            "--set engine.timing_model.type=nope: engine.timing_model.type: unknown timing_model 'nope'",
        ),
        (
            "{}",
            ["engine.eviction_policy=mru"],
            "--set engine.eviction_policy=mru: engine.eviction_policy: "
            "unknown eviction_policy 'mru'; installed: lfu, lineage, lru, multi_lru",
        ),
        ("{}", ["engine.nope=1"], "--set engine.nope=1: engine.nope: unknown key"),
        ("{}", ["nope"], "--set: expected KEY=VALUE"),
        ("engine:\n  a: [\n", [], "{file}:3: invalid YAML: "),
        (
            TOY,
            ["engine.timing_model.pass_ms=-2"],
            "{file}: engine.timing_model: timing model 'toy_constant' "
            "rejected its options: pass_ms must be > 0, got -2.0",
        ),
    ],
)
def test_validate_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, sets: list[str], expected: str
) -> None:
    path = write(tmp_path, text)
    argv = ["validate", path]
    for item in sets:
        argv += ["--set", item]
    assert_user_error(capsys, cli.main(argv), expected.format(file=path))


def test_validate_checks_the_trace_file_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "workload: {trace: {path: nowhere.jsonl}}")
    rc = cli.main(["validate", path])
    assert_user_error(capsys, rc, f"{path}: workload.trace.path: no such trace file 'nowhere.jsonl'")
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    assert cli.main(["validate", path, "--set", f"workload.trace.path={trace}"]) == 0
    assert capsys.readouterr().out.endswith("workload trace (format mooncake)\n")


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing.yaml")
    assert_user_error(capsys, cli.main(["validate", missing]), f"{missing}: cannot read config file")


def test_a_broken_plugin_fails_a_run_and_is_listed_by_plugins(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ep = importlib.metadata.EntryPoint("broken", "servesim_no_such_module_xyz", "servesim")
    dist = argparse.Namespace(metadata={"Name": "broken-dist"}, version="0.1", entry_points=[ep])
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [dist])
    message = ("plugin 'broken' (entry point 'servesim_no_such_module_xyz' "
               "of distribution broken-dist 0.1) failed to load: ModuleNotFoundError")
    err = assert_user_error(capsys, cli.main(["run", "--quiet"]), message)
    # the same failure, listed: every other plugin still shows, the broken one is marked
    assert cli.main(["plugins"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert "  lru  plugin servesim.builtins.kv  (servesim " in out
    broken = out.splitlines()[-1]
    assert broken.startswith(f"broken plugin broken: {message}")
    assert broken.endswith("; set SERVESIM_DISABLE_PLUGINS=broken to run without it")


def test_no_arguments_means_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def fake_run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 7

    import servesim.cli.run

    monkeypatch.setattr(servesim.cli.run, "run", fake_run)
    assert cli.main([]) == 7
    assert seen[0].command == "run" and seen[0].config == [] and seen[0].sets == []
    assert cli.main(["run", "x.yaml", "--set", "engine.dp_size=2"]) == 7
    assert (seen[1].config, seen[1].sets) == (["x.yaml"], ["engine.dp_size=2"])
    assert cli.main(["run", "base.yaml", "fit.yaml"]) == 7
    assert seen[2].config == ["base.yaml", "fit.yaml"]


def test_run_without_replay_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_cli_run", lambda: None)
    assert cli.main(["run", "anything.yaml"]) == 2
    err = capsys.readouterr().err
    assert "'servesim run' is not available" in err and "servesim plugins" in err


def test_run_config_error_goes_through_the_edge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "engine: {num_gpu_blocks: 0}")
    rc = cli.main(["run", path, "--quiet"])
    assert_user_error(capsys, rc, f"{path}: engine.num_gpu_blocks: expected an integer in [1, 16777216], got 0")


def test_version_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"servesim {importlib.metadata.version('servesim')}\n"
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_console_script_error_has_no_traceback(tmp_path: Path) -> None:
    """The ``servesim`` console script (``servesim.cli.main:console``) exits 2 with one line."""
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="servesim")
    assert script.value == "servesim.cli.main:console"
    path = write(tmp_path, "engine: {dp_size: 0}")
    proc = subprocess.run(
        [sys.executable, "-m", "servesim.cli.main", "validate", path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"servesim: error: {path}: engine.dp_size: expected an integer >= 1, got 0\n"


def test_the_console_script_spares_the_exit_collection(monkeypatch, capsys) -> None:
    """``console`` returns ``main``'s status and leaves the objects alive then to the
    collector's permanent generation (the interpreter is about to exit); ``main`` alone,
    which tests call, freezes nothing."""
    import gc

    monkeypatch.setattr(sys, "argv", ["servesim", "frobnicate"])
    before = gc.get_freeze_count()
    try:
        assert cli.main(["frobnicate"]) == 2
        assert gc.get_freeze_count() == before
        assert cli.console() == 2
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_validate_takes_overrides_alone_and_names_the_eviction_policy_and_sinks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kv = tmp_path / "kv.jsonl"
    sets = ["--set", "cluster.workers=2", "--set", "engine.eviction_policy={type: lru}",
            "--set", f"sinks.kv_events=[{{type: tee, sinks: [{{type: jsonl, path: {kv}}}]}}, {{type: memory}}]"]
    assert cli.main(["validate", *sets]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == (
        "OK: the built-in default scenario: backend vllm (block_size 64, dp_size 1), timing "
        "polynomial, eviction lru, 2 workers, router round_robin, workload synthetic, "
        "kv_events tee+memory\n"
    )
    assert not kv.exists()  # validating builds sinks without creating their files
    assert cli.main(["validate", "--set", "workload.admission={type: queue_shed, max_in_flight: 4}"]) == 0
    assert capsys.readouterr().out.endswith(", workload synthetic, admission queue_shed\n")
    assert cli.main(["validate", "--set", "planner={type: static, interval_s: 5}"]) == 0
    assert capsys.readouterr().out.endswith(", workload synthetic, planner static\n")


def test_a_split_with_a_backend_that_cannot_hand_off_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, TOY + "cluster: {prefill_workers: 1, decode_workers: 2}\n")
    message = (f"{path}: cluster.prefill_workers: a prefill/decode split (prefill workers hand "
               "prefills to decode workers) needs the backend capability Handoff "
               "(servesim.rank.Handoff); backend 'toy' (plugin toy from servesim-toy 0.1.0, class "
               "ToyRank) does not declare it")
    for argv in (["validate", path], ["run", path]):
        assert_user_error(capsys, cli.main(argv), message)
