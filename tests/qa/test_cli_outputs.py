"""The console script as a user meets it: byte-identical outputs across runs and hash seeds,
``--version``/``--help``/``plugins``/``validate`` output, and no progress line when stderr is
not a terminal (issue 4 item 5)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.plugins import servesim_version

WORKLOAD = [
    "--set",
    "workload.synthetic.num_requests=40",
    "--set",
    "workload.synthetic.turns_per_session=2",
    "--set",
    "cluster.workers=2",
    "--set",
    "cluster.router=kv",
]


def servesim(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console entry point in a fresh interpreter (stdin/stdout/stderr pipes)."""
    code = "import sys; from servesim.cli.main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_outputs_are_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    files = []
    out = tmp_path / "out"  # one place: the report's config names the sink paths
    for seed in ("0", "1", "12345"):
        sinks = [f"sinks.{kind}=[{{type: jsonl, path: {out / kind}.jsonl}}]" for kind in ("kv_events", "fpm")]
        done = servesim(
            "run",
            *WORKLOAD,
            "--quiet",
            "--output-json",
            str(out / "r.json"),
            "--per-request",
            str(out / "p.jsonl"),
            "--set",
            sinks[0],
            "--set",
            sinks[1],
            env={"PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr
        assert (done.stdout, done.stderr) == ("", "")  # --quiet, and stderr is not a terminal
        files.append(
            tuple((out / name).read_bytes() for name in ("r.json", "p.jsonl", "kv_events.jsonl", "fpm.jsonl"))
        )
    assert files[0] == files[1] == files[2]
    assert files[0][2].count(b"BlockStored") > 0 and files[0][3].count(b"\"scheduled_requests\"") > 0
    report = json.loads(files[0][0])
    assert report["completed"] == 40
    assert len(files[0][1].splitlines()) == 40


def test_disaggregated_outputs_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "run",
        "--set",
        "workload.synthetic.num_requests=20",
        "--set",
        "cluster.prefill_workers=1",
        "--set",
        "cluster.decode_workers=2",
        "--set",
        "engine.backend=sglang",
        "--quiet",
    ]
    outs = []
    for i in range(2):
        assert (
            main(
                [
                    *args,
                    "--output-json",
                    str(tmp_path / f"{i}.json"),
                    "--per-request",
                    str(tmp_path / f"{i}.jsonl"),
                ]
            )
            == 0
        )
        outs.append(((tmp_path / f"{i}.json").read_bytes(), (tmp_path / f"{i}.jsonl").read_bytes()))
    assert outs[0] == outs[1]
    assert capsys.readouterr().out == ""


def test_no_progress_line_when_stderr_is_a_pipe() -> None:
    """A run long enough to show progress on a terminal (> 1 s) writes nothing to a pipe."""
    done = servesim(
        "run", "--set", "workload.synthetic.num_requests=600", "--set", "workload.synthetic.rate=1000"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "Serving Benchmark Result" in done.stdout and "\r" not in done.stdout
    assert "Successful requests:                                     600" in done.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"servesim {servesim_version()}\n"


def test_run_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "CONFIG.yaml",
        "--trace PATH",
        "--set KEY=VALUE",
        "--output-json PATH",
        "--per-request PATH",
        "--json",
        "--quiet",
    ):
        assert flag in out, flag


def test_validate_prints_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sim.yaml"
    config.write_text("engine: {backend: sglang, dp_size: 2}\ncluster: {workers: 3, router: kv}\n")
    assert main(["validate", str(config)]) == 0
    assert capsys.readouterr().out == (
        f"OK: {config}: backend sglang (block_size 1, dp_size 2), timing polynomial, eviction lru, 3 workers, "
        "router kv, workload synthetic\n"
    )


def test_plugins_json_matches_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert main(["plugins"]) == 0
    table = capsys.readouterr().out
    expected_kinds = {
        "backend",
        "timing_model",
        "eviction_policy",
        "kv_event_sink",
        "fpm_sink",
        "trace_format",
        "router",
    }
    assert expected_kinds <= set(listing["kinds"])
    names = {kind: {row["name"] for row in rows} for kind, rows in listing["kinds"].items()}
    assert {"vllm", "sglang", "trtllm"} <= names["backend"]
    assert {"polynomial", "fixed", "interpolated"} <= names["timing_model"]
    assert {"round_robin", "kv"} <= names["router"]
    for kind, rows in listing["kinds"].items():
        assert f"{kind}:\n" in table
        for row in rows:
            assert f"plugin {row['plugin']}  ({row['distribution']} {row['version']})" in table


class _Terminal:
    """A stderr stand-in that says it is a terminal."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], terminal: bool
) -> None:
    from servesim.cli.progress import RunProgress

    original = RunProgress.__init__

    def immediate(
        self: RunProgress, stream: object, delay_s: float = 1.0, interval_s: float = 0.1
    ) -> None:
        original(self, stream, delay_s=0.0, interval_s=0.0)  # type: ignore[arg-type]

    monkeypatch.setattr(RunProgress, "__init__", immediate)
    fake = _Terminal()
    if terminal:
        monkeypatch.setattr(sys, "stderr", fake)
    assert main(["run", "--set", "workload.synthetic.num_requests=5", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)  # the JSON on stdout is never mixed with progress
    if terminal:
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", fake.text)
        assert re.search(r"━+ 5/5 requests sim \d+\.\d s wall .* req/s\n$", plain), plain[-120:]
    else:
        assert captured.err == ""


def test_closed_stdout_pipe_is_not_a_traceback() -> None:
    """``servesim plugins | head -1``: the reader leaves early; no traceback, SIGPIPE's status."""
    code = "import sys; from servesim.cli.main import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child writes anything
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


def test_unknown_name_mentions_blocking_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", "vllm")
    assert main(["validate", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: /dev/null: engine.backend: unknown backend 'vllm'; installed: ")
    assert err.endswith(" (SERVESIM_DISABLE_PLUGINS blocks vllm)\n")


def test_quiet_wins_over_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "run",
                "--set",
                "workload.synthetic.num_requests=2",
                "--json",
                "--quiet",
                "--output-json",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr() == ("", "")
    assert json.loads(out.read_text())["completed"] == 2
