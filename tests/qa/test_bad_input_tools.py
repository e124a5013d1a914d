"""Bad input to the tool commands and newer keys (calibrate, plot, sweep, fixed-length timing
options, the figures folder): one ``servesim: error:`` line naming the file, line or key
path, exit status 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main

from tests.qa.test_bad_input import fail, write

SMALL = ["--set", "workload.synthetic.num_requests=3"]
DECODE = {"worker": 0, "duration_ms": 1, "num_decode_requests": 1, "sum_decode_kv_tokens": 5}


def test_calibrate_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "o.yaml")
    binary = write(tmp_path, "b.jsonl", b'{"worker": 0}\n\xff\xfe\n')
    assert fail(["calibrate", binary, "-o", out], capsys) == f"{binary}:2: not UTF-8 text: byte 0xff at column 1"
    missing = str(tmp_path / "nope.jsonl")
    assert fail(["calibrate", missing, "-o", out], capsys) == (
        f"{missing}: cannot read forward-pass metrics: No such file or directory")
    empty = write(tmp_path, "e.jsonl", "")
    assert fail(["calibrate", empty, "-o", out], capsys) == (
        f"{empty}: calibrate needs at least 3 decode-only passes, the file has 0")
    same = write(tmp_path, "s.jsonl", (json.dumps(DECODE) + "\n") * 4)
    # Four equal passes: numpy would only warn (a second stderr line) and fit nonsense.
    assert fail(["calibrate", same, "-o", out, "--model", "polynomial", "--kv-tokens", "100"], capsys) == (
        f"{same}: calibrate needs decode-only passes at 3 or more distinct sizes, the file has 1")
    assert fail(["calibrate", same, "-o", out, "--kv-tokens", "-5"], capsys) == (
        "--kv-tokens: expected an integer >= 1, got -5")
    assert not Path(out).exists()


def _report(tmp_path: Path, **changes: object) -> str:
    report = {"completed": 1, "percentiles": [50.0], "p50_ttft_ms": 1.0, "sla": {}, "config": {}}
    return write(tmp_path, "r.json", json.dumps({**report, **changes}))


@pytest.mark.parametrize(("changes", "expected"), [
    ({"p50_ttft_ms": "abc"}, "'p50_ttft_ms' must be a number, got 'abc'"),
    ({"percentiles": ["a"]}, "'percentiles' must be a list of numbers, got ['a']"),
    ({"sla": {"ttft_ms": "a"}}, "'sla.ttft_ms' must be a number, got 'a'"),
    ({"config": 5}, "'config' must be a mapping, got 5"),
    ({"config": {"cluster": {"prefill_workers": "x"}}},
     "'config.cluster' must be a mapping with an integer prefill_workers, got {'prefill_workers': 'x'}"),
])
def test_plot_bad_report_values(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                changes: dict[str, object], expected: str) -> None:
    path = _report(tmp_path, **changes)
    assert fail(["plot", path, "-o", str(tmp_path / "figs")], capsys) == f"{path}: {expected}"


@pytest.mark.parametrize("flag", ["--per-request", "--fpm"])
def test_plot_undecodable_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    report = _report(tmp_path)
    lines = write(tmp_path, "l.jsonl", b"\n\xff\n")
    assert fail(["plot", report, flag, lines, "-o", str(tmp_path / "f")], capsys) == (
        f"{lines}:2: not UTF-8 text: byte 0xff at column 1")


def test_polynomial_coefficients_need_three_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for value, shown in (("5", "a list, got 5"), ("[1, 2]", "a list of 3 items, got [1, 2]")):
        item = f"engine.timing_model={{type: polynomial, prefill: {value}}}"
        assert fail(["validate", "--set", item, write(tmp_path, "c.yaml", "")], capsys) == (
            f"--set {item}: engine.timing_model.prefill: expected {shown}")


def test_plot_folder_error_names_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = write(tmp_path, "file", "")
    assert fail(["run", *SMALL, "--set", f"report.plot={blocker}"], capsys) == (
        f"report.plot: cannot create the figures folder {blocker!r}: File exists")


def _sweep(tmp_path: Path, text: str) -> list[str]:
    path = write(tmp_path, "sw.yaml", "base: {workload: {synthetic: {num_requests: 3}}}\n" + text)
    return ["sweep", path, "--out", str(tmp_path / "out"), "--parallel", "1"]


def test_sweep_bad_seed_pareto_and_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _sweep(tmp_path, "seeds: [1, -1]\n")
    assert fail(argv, capsys) == f"{argv[1]}: seeds[1]: expected an integer >= 0 (workload.seed), got -1"
    argv = _sweep(tmp_path, "pareto: {x: nope, y: p99_ttft_ms}\n")
    assert fail(argv, capsys) == f"{argv[1]}: pareto.x: no completed point reports a numeric 'nope'"
    assert not (tmp_path / "out" / "pareto.png").exists()
    argv = _sweep(tmp_path, "")
    assert main([*argv, "--executor", "ray", "--address", "nope"]) == 2
    err = capsys.readouterr().err
    assert err == "servesim: error: cannot reach the Ray cluster at 'nope': Invalid address format: nope\n"
