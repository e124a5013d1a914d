"""`servesim run --plot DIR`, `report.plot` and `servesim plot`: which figures, from which files,
deterministic bytes, wire-schema FPM input, errors, and no matplotlib/rich unless asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from servesim.cli.main import main
from servesim_plot.files import load_fpm

SETS = ["workload.synthetic.num_requests=80", "workload.synthetic.rate=20",
        "cluster.workers=2", "cluster.router=kv"]


def _sets(*extra: str) -> list[str]:
    return sum((["--set", s] for s in [*SETS, *extra]), [])


def _pngs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.png"))}


def test_run_plot_writes_the_figures_and_keeps_the_report(tmp_path, capsys) -> None:
    plain, plotted = tmp_path / "plain.json", tmp_path / "plotted.json"
    assert main(["run", "--quiet", "--output-json", str(plain), *_sets()]) == 0
    assert main(["run", "--output-json", str(plotted), "--plot", str(tmp_path / "a"), *_sets()]) == 0
    assert f"4 figures written to {tmp_path / 'a'}" in capsys.readouterr().out
    assert plain.read_bytes() == plotted.read_bytes()
    figures = _pngs(tmp_path / "a")
    assert list(figures) == ["latency_cdf.png", "timeline_worker0.png", "timeline_worker1.png",
                             "workers.png"]
    assert all(b.startswith(b"\x89PNG") for b in figures.values())
    assert b"matplotlib" not in figures["latency_cdf.png"]  # no version in the metadata
    assert main(["run", "--quiet", "--plot", str(tmp_path / "b"), *_sets()]) == 0
    assert _pngs(tmp_path / "b") == figures


def test_report_plot_key_and_saved_files(tmp_path) -> None:
    fpm = tmp_path / "fpm.jsonl"
    out = ["--output-json", str(tmp_path / "r.json"), "--per-request", str(tmp_path / "r.jsonl")]
    sinks = f"sinks.fpm=[{{type: jsonl, path: {json.dumps(str(fpm))}}}]"
    sets = _sets(f"report.plot={json.dumps(str(tmp_path / 'run'))}", sinks)
    assert main(["run", "--quiet", *out, *sets]) == 0
    assert main(["plot", str(tmp_path / "r.json"), "--per-request", str(tmp_path / "r.jsonl"),
                 "--fpm", str(fpm), "-o", str(tmp_path / "files")]) == 0
    run, files = _pngs(tmp_path / "run"), _pngs(tmp_path / "files")
    assert list(run) == list(files)
    # the per-request file holds every request fact the balance figure reads; an FPM file
    # has no KV occupancy nor preemption events, so its timelines draw what FPM carries
    assert run["workers.png"] == files["workers.png"]
    # a report alone still draws the CDFs, from its percentiles
    assert main(["plot", str(tmp_path / "r.json"), "-o", str(tmp_path / "bare"),
                 "--compare", str(tmp_path / "r.json")]) == 0
    assert list(_pngs(tmp_path / "bare")) == ["latency_cdf.png"]


def _wire(worker: str, wall: float, prefill: int, decode: int, queued: int, preempted: int) -> str:
    sched = {"num_prefill_requests": 1 if prefill else 0, "sum_prefill_tokens": prefill,
             "var_prefill_length": 0.0, "sum_prefill_kv_tokens": 64,
             "num_decode_requests": decode, "sum_decode_kv_tokens": 100 * decode,
             "var_decode_kv_tokens": 0.0}
    queue = {"num_prefill_requests": queued, "sum_prefill_tokens": 10 * queued,
             "var_prefill_length": 0.0, "num_decode_requests": preempted,
             "sum_decode_kv_tokens": 0, "var_decode_kv_tokens": 0.0}
    return json.dumps({"version": 1, "worker_id": worker, "dp_rank": 0, "counter_id": 0,
                       "wall_time": wall, "scheduled_requests": sched, "queued_requests": queue})


def test_wire_schema_fpm_lays_passes_end_to_end(tmp_path) -> None:
    path = tmp_path / "wire.jsonl"
    path.write_text("\n".join([
        _wire("abc", 0.020, 512, 0, 2, 0),
        _wire("abc", 0.0, 0, 0, 0, 0),  # idle heartbeat
        _wire("abc", 0.005, 0, 3, 1, 2),
        _wire("abc", 0.004, 0, 2, 0, 1),
        _wire("7", 0.010, 100, 1, 0, 0),
    ]) + "\n")
    ranks = load_fpm(str(path))
    assert list(ranks) == [("7", 0), ("abc", 0)]  # numbered workers first
    c = ranks[("abc", 0)].columns
    assert np.allclose(c["end_ms"], [20.0, 25.0, 29.0])
    assert c["running"].tolist() == [1, 3, 2]
    assert c["waiting"].tolist() == [2, 3, 1]
    assert c["batch_tokens"].tolist() == [512, 3, 2]
    assert c["kv_tokens"].tolist() == [576, 364, 264]
    assert np.isnan(c["kv_usage"]).all()
    assert np.allclose(ranks[("abc", 0)].preempt_ms, [25.0, 25.0])  # queued decode 0 -> 2


def test_wire_schema_fpm_with_simulated_clock(tmp_path) -> None:
    """servesim's own nested JSONL lines carry ``at_ms``; a zero-length pass with work stays."""
    lines = [json.loads(_wire("0", 0.0, 0, 2, 0, 0)) | {"at_ms": 40.0},
             json.loads(_wire("0", 0.0, 0, 0, 0, 0)) | {"at_ms": 41.0},  # heartbeat
             json.loads(_wire("0", 0.003, 0, 2, 0, 0)) | {"at_ms": 50.0}]
    path = tmp_path / "f.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    c = load_fpm(str(path))[("0", 0)].columns
    assert c["end_ms"].tolist() == [40.0, 50.0]
    assert c["duration_ms"].tolist() == [0.0, 3.0]


def test_wire_schema_fpm_draws_a_timeline(tmp_path) -> None:
    fpm = tmp_path / "wire.jsonl"
    fpm.write_text(_wire("0", 0.02, 512, 0, 1, 0) + "\n" + _wire("0", 0.01, 0, 1, 0, 0) + "\n")
    report = tmp_path / "r.json"
    assert main(["run", "--quiet", "--output-json", str(report), *_sets()]) == 0
    assert main(["plot", str(report), "--fpm", str(fpm), "-o", str(tmp_path / "o")]) == 0
    assert list(_pngs(tmp_path / "o")) == ["latency_cdf.png", "timeline_worker0.png"]


@pytest.mark.parametrize("body, message", [
    ('{"request_id": 0}\nnot json\n', "r.jsonl:1: missing key 'arrival_ms'"),
    ('\n[1]\n', "r.jsonl:2: expected a JSON object"),
    ('{"x": 1\n', "r.jsonl:1: invalid JSON: Expecting ',' delimiter (column 8)"),
    ("[" * 100_000 + "]" * 100_000 + "\n", "r.jsonl:1: JSON nested too deeply to read"),
])
def test_bad_per_request_file_names_the_line(tmp_path, capsys, body, message) -> None:
    report = tmp_path / "r.json"
    report.write_text('{"completed": 0}')
    (tmp_path / "r.jsonl").write_text(body)
    code = main(["plot", str(report), "--per-request", str(tmp_path / "r.jsonl"), "-o",
                 str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and message in err and "Traceback" not in err


def test_bad_report_and_fpm_are_one_line_errors(tmp_path, capsys) -> None:
    (tmp_path / "r.json").write_text("[]")
    assert main(["plot", str(tmp_path / "r.json"), "-o", str(tmp_path / "o")]) == 2
    assert "r.json: not a servesim report" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o")]) == 2
    assert "missing.json: cannot read" in capsys.readouterr().err
    (tmp_path / "r.json").write_text('{"completed": 1}')
    (tmp_path / "f.jsonl").write_text('{"worker": 0, "dp_rank": "x"}\n')
    assert main(["plot", str(tmp_path / "r.json"), "--fpm", str(tmp_path / "f.jsonl"),
                 "-o", str(tmp_path / "o")]) == 2
    assert "f.jsonl:1: missing key 'num_prefill_requests'" in capsys.readouterr().err
    (tmp_path / "f.jsonl").write_text(_wire("0", 0.1, 1, 0, 0, 0).replace('"dp_rank": 0',
                                                                           '"dp_rank": "x"'))
    assert main(["plot", str(tmp_path / "r.json"), "--fpm", str(tmp_path / "f.jsonl"),
                 "-o", str(tmp_path / "o")]) == 2
    assert "f.jsonl:1: 'dp_rank' must be int, got 'x'" in capsys.readouterr().err


def test_run_without_plot_loads_neither_matplotlib_nor_rich() -> None:
    code = ("import sys; from servesim.cli.main import main; "
            "main(['run', '--quiet', '--set', 'workload.synthetic.num_requests=5']); "
            "print(sorted(m for m in ('matplotlib', 'rich', 'pyarrow', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_unusable_plot_folder_fails_before_the_run(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--plot", str(blocker / "figs"), *_sets()]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no report table: the run never started
    assert captured.err.startswith(f"servesim: error: --plot: cannot create the figures folder '{blocker}/figs'")
