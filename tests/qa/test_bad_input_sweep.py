"""What a sweep of malformed input over every command turned up: each ends in one
``servesim: error:`` line that names the file:line, key path or flag, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.workload import mooncake, synthetic

from tests.qa.test_bad_input import GOOD, fail, write


@pytest.mark.parametrize("key", ["output_length", "output_tokens"])
def test_trace_output_length_is_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """An output of 1e11 tokens used to exhaust memory (per-request block tables are sized
    by it) and end as an empty 'engine poisoned: ... failed: ' line."""
    record = {k: v for k, v in GOOD.items() if k != "output_length"}
    trace = write(tmp_path, "t.jsonl", json.dumps({**record, key: 10**11}) + "\n")
    assert fail(["run", "--trace", trace], capsys) == (
        f"{trace}:1: {key!r} must be at most 16777216, got 100000000000")
    config = write(tmp_path, "sim.yaml", f"workload: {{trace: {{path: {trace}}}}}")
    assert fail(["validate", config], capsys) == (
        f"{trace}:1: {key!r} must be at most 16777216, got 100000000000")
    write(tmp_path, "t.jsonl", json.dumps({**record, key: 1 << 24}) + "\n")
    assert main(["validate", config]) == 0  # the bound itself is a valid length
    assert mooncake.MAX_OUTPUT_LENGTH == synthetic.MAX_LENGTH


def test_set_takes_the_indexed_paths_errors_print(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path, "sim.yaml", "cluster: {pools: [{name: a, workers: 1}]}\n")
    for item in ("cluster.pools[0].workers=3", "cluster.pools.0.workers=3"):
        assert main(["validate", config, "--set", item]) == 0
        assert "3 workers in 1 pool (a 3)" in capsys.readouterr().out
    item = "cluster.pools[x].workers=3"
    assert fail(["validate", config, "--set", item], capsys) == (
        f"--set {item}: expected KEY or KEY[N] in a dotted key, got 'pools[x]'")
    item = "cluster.pools[2].workers=3"
    assert fail(["validate", config, "--set", item], capsys) == (
        f"--set {item}: cluster.pools: cannot set cluster.pools.2.workers: cluster.pools is a "
        "list of 1; use an index below 1 or set the whole list")


def test_a_key_glued_to_its_value_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``{type:lfu}`` is YAML for one key 'type:lfu' without a value; it used to be reported
    as 'type: required key missing'."""
    config = write(tmp_path, "sim.yaml", "engine:\n  timing_model: {type:fixed}\n")
    assert fail(["run", config], capsys) == (
        f"{config}:2: invalid YAML: while constructing a mapping found the key 'type:fixed' with "
        "no value; put a space after the colon (type: fixed) (column 18)")
    item = "sinks.fpm=[{type:jsonl, path: x}]"
    assert fail(["validate", write(tmp_path, "e.yaml", ""), "--set", item], capsys) == (
        f"--set {item}: invalid YAML: while constructing a mapping found the key 'type:jsonl' "
        "with no value; put a space after the colon (type: jsonl)")
    # a colon inside a value is not a glued key
    fine = write(tmp_path, "ok.yaml", 'sinks: {kv_events: [{type: jsonl, path: "a:b.jsonl"}]}\n')
    assert main(["validate", fine]) == 0


FPM = {"worker": 0, "duration_ms": 2.0, "num_prefill_requests": 0, "num_decode_requests": 1}


def _fpm(tmp_path: Path) -> str:
    rows = [{**FPM, "sum_decode_kv_tokens": 100 * i, "duration_ms": 1.0 + i} for i in range(1, 6)]
    rows += [{**FPM, "num_decode_requests": 0, "num_prefill_requests": 1,
              "sum_prefill_tokens": 64 * i, "duration_ms": 3.0 * i} for i in range(1, 4)]
    return write(tmp_path, "fpm.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_calibrate_checks_its_outputs_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o .`` used to leave a stray '..profile.json' behind before failing."""
    monkeypatch.chdir(tmp_path)
    fpm = _fpm(tmp_path)
    write(tmp_path, "file", "x")
    (tmp_path / "d.profile.json").mkdir()
    for out, message in ((".", "'.': it names a directory"),
                         ("new/", "'new/': it names a directory"),
                         ("file/x.yaml", "'file/x.yaml': its folder 'file' is a file"),
                         ("d.yaml", "'d.profile.json': it is a directory")):
        assert fail(["calibrate", fpm, "-o", out], capsys) == f"--output: cannot write {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.profile.json", "file", "fpm.jsonl"]
    assert main(["calibrate", fpm, "-o", "sub/c.yaml"]) == 0  # its folder is created
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["c.profile.json", "c.yaml"]


def test_plot_and_sweep_output_folders_that_are_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = write(tmp_path, "file", "x")
    report = write(tmp_path, "r.json", json.dumps({"completed": 0}))
    assert fail(["plot", report, "-o", blocker], capsys) == (
        f"--out: cannot write the figures folder {blocker!r}: it is a file")
    sweep = write(tmp_path, "sw.yaml", "base: {workload: {synthetic: {num_requests: 2}}}\n")
    assert fail(["sweep", sweep, "--out", f"{blocker}/x"], capsys) == (
        f"--out: cannot write into '{blocker}/x': its folder {blocker!r} is a file")
