"""`servesim sweep` end to end: local processes and a local Ray cluster give the same bytes;
a failed point is recorded; --resume runs only what is missing; the outputs a person reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.report.summary import dumps

SWEEP = """\
base: base.yaml
grid:
  engine.max_num_seqs: [2, 16]
  cluster.workers: [1, 2]
points:
  - {cluster.workers: 1, workload.trace.path: missing.jsonl, workload.synthetic: null}
seeds: [1, 2]
objectives:
  maximize: output_throughput_per_gpu
  subject_to: ["p99_ttft_ms <= 400"]
"""


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(
        "workload: {synthetic: {num_requests: 24, rate: 16}}\nreport: {sla_ttft_ms: 400}\n")
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    return path


def _outputs(folder: Path) -> dict[str, bytes]:
    files = [*sorted((folder / "points").glob("*.json")), folder / "results.csv",
             folder / "results.parquet", folder / "pareto.png"]
    return {str(p.relative_to(folder)): p.read_bytes() for p in files}


def test_local_and_ray_executors_write_identical_results(sweep_file, tmp_path, capsys) -> None:
    pytest.importorskip("ray")
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    assert main(["sweep", str(sweep_file), "--out", str(local), "--parallel", "2"]) == 0
    out = capsys.readouterr().out
    assert main(["sweep", str(sweep_file), "--out", str(ray_out), "--executor", "ray",
                 "--parallel", "2"]) == 0
    import ray

    assert not ray.is_initialized()  # the local cluster was shut down
    assert _outputs(local) == _outputs(ray_out)
    assert len(_outputs(local)) == 10 + 3
    assert "10 points (2 failed)" in out and "Best of 5 configurations" in out


def test_records_rows_failures_and_the_best_table(sweep_file, tmp_path, capsys) -> None:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    out_dir = tmp_path / "o"
    assert main(["sweep", str(sweep_file), "--out", str(out_dir), "--parallel", "1"]) == 0
    captured = capsys.readouterr()
    records = [json.loads(p.read_text()) for p in sorted((out_dir / "points").glob("*.json"))]
    assert len(records) == 10
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 2 and all(r["report"] is None for r in failed)
    assert all("missing.jsonl" in r["error"] and r["error"].startswith("TraceError") for r in failed)
    assert captured.err.count("failed: TraceError") == 2
    ok = [r for r in records if r["status"] == "ok"]
    assert {r["gpus"] for r in ok} == {1, 2}
    assert all(r["report"]["completed"] == 24 for r in ok)
    lines = (out_dir / "results.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[:8] == ["id", "seed", "status", "error", "gpus", "set.cluster.workers",
                          "set.engine.max_num_seqs", "set.workload.synthetic"]
    assert "output_throughput_per_gpu" in header and "sla.ttft_ms" in header
    assert "config" not in header and len(lines) == 11
    table = pq.read_table(out_dir / "results.parquet")
    assert table.column_names == header and table.num_rows == 10
    rows = table.to_pylist()
    for row in rows:
        if row["status"] == "ok":
            assert row["output_throughput_per_gpu"] == pytest.approx(
                row["output_throughput"] / row["gpus"])
    # the table lists the feasible configurations, best first, by mean over seeds
    means: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["status"] == "ok":
            key = (row["set.engine.max_num_seqs"], row["set.cluster.workers"])
            means.setdefault(key, []).append(row)
    ranked = sorted(
        (k for k, rs in means.items()
         if sum(r["p99_ttft_ms"] for r in rs) / len(rs) <= 400),
        key=lambda k: -sum(r["output_throughput_per_gpu"] for r in means[k]) / len(means[k]))
    shown = [line for line in captured.out.splitlines() if "max_num_seqs=" in line]
    assert [ln.split("│")[2].strip() for ln in shown] == [
        f"max_num_seqs={s}, workers={w}" for s, w in ranked]
    assert (out_dir / "pareto.png").read_bytes().startswith(b"\x89PNG")


def test_resume_runs_only_missing_and_failed_points(sweep_file, tmp_path, monkeypatch) -> None:
    import servesim_sweep.executors as executors

    out_dir = tmp_path / "o"
    assert main(["sweep", str(sweep_file), "--out", str(out_dir), "--parallel", "1"]) == 0
    before = _outputs(out_dir)
    points = sorted((out_dir / "points").glob("*.json"))
    ok = [p for p in points if json.loads(p.read_text())["status"] == "ok"]
    gone, garbled = ok[0], ok[1]
    gone.unlink()
    garbled.write_bytes(b"\xff\xfe not UTF-8 \x80")  # unreadable: run again, no traceback
    ran: list[str] = []
    original = executors.run_point

    def counting(base, point):
        ran.append(point.id)
        return original(base, point)

    monkeypatch.setattr(executors, "run_point", counting)
    assert main(["sweep", str(sweep_file), "--out", str(out_dir), "--parallel", "1",
                 "--resume"]) == 0
    failed = {json.loads(p.read_text())["id"] for p in points
              if p.exists() and json.loads(p.read_text())["status"] == "failed"}
    assert sorted(ran) == sorted({gone.stem, garbled.stem, *failed})
    assert _outputs(out_dir) == before


def test_a_point_record_is_the_run_report(sweep_file, tmp_path) -> None:
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    out_dir = tmp_path / "o"
    assert main(["sweep", str(sweep_file), "--out", str(out_dir), "--parallel", "1"]) == 0
    record = next(json.loads(p.read_text()) for p in (out_dir / "points").glob("*.json")
                  if json.loads(p.read_text())["overrides"] == {"engine.max_num_seqs": 16,
                                                                "cluster.workers": 2}
                  and json.loads(p.read_text())["seed"] == 2)
    sets = ["engine.max_num_seqs=16", "cluster.workers=2", "workload.seed=2"]
    report = simulate(load_config(str(tmp_path / "base.yaml"), sets)).report
    assert dumps(record["report"]) == dumps(report)
    # `servesim plot` draws a point's CDFs from its record
    path = next(p for p in (out_dir / "points").glob("*.json") if json.loads(p.read_text()) == record)
    assert main(["plot", str(path), "-o", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig" / "latency_cdf.png").is_file()


def test_cli_argument_errors(sweep_file, tmp_path, capsys) -> None:
    assert main(["sweep", str(sweep_file), "--parallel", "0", "--out", str(tmp_path)]) == 2
    assert "--parallel must be at least 1" in capsys.readouterr().err
    assert main(["sweep", str(sweep_file), "--address", "x:1", "--out", str(tmp_path)]) == 2
    assert "--address needs --executor ray" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(SWEEP.replace("maximize: output_throughput_per_gpu", "maximize: nope"))
    assert main(["sweep", str(bad), "--out", str(tmp_path / "b"), "--parallel", "1"]) == 2
    # servesim-toy adds report keys: an unknown key is checked once the points ran
    assert f"{bad}: objectives.maximize: no completed point reports a numeric 'nope'" in (
        capsys.readouterr().err)


def test_sweep_progress_bar_counts_points_and_failures() -> None:
    import io
    import re

    from servesim.cli.progress import SweepProgress

    stream = io.StringIO()
    bar = SweepProgress(stream, interval_s=0.0)
    bar(0, 4, 0)
    bar(3, 4, 1)
    bar(4, 4, 1)
    bar.finish()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]
    assert lines[0].endswith("0/4 points 0 failed wall 0:00:00 ETA -:--:--")
    assert any(re.fullmatch(r"\S+ 3/4 points 1 failed wall \d:\d\d:\d\d ETA \S+", ln)
               for ln in lines)
    assert re.fullmatch(r"━+ 4/4 points 1 failed wall \d:\d\d:\d\d ETA 0:00:00", lines[-1])


def test_an_unreachable_ray_address_fails_at_once(sweep_file, tmp_path, capsys) -> None:
    import socket

    with socket.socket() as sock:  # a port on this host that nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = main(["sweep", str(sweep_file), "--out", str(tmp_path / "o"), "--executor", "ray",
                 "--address", f"127.0.0.1:{port}"])
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"servesim: error: cannot reach the Ray cluster at '127.0.0.1:{port}': ")


def test_a_worker_process_that_dies_fails_its_points(tmp_path, monkeypatch) -> None:
    """Points whose process ended abruptly (as under the kernel's OOM killer: the pool is
    broken) are recorded failed with the reason; none is lost and the sweep goes on."""
    import concurrent.futures as cf
    from concurrent.futures.process import BrokenProcessPool

    from servesim_sweep.executors import run_local
    from servesim_sweep.spec import Point

    class BrokenPool:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def __enter__(self) -> BrokenPool:
            return self

        def __exit__(self, *args: object) -> None:
            pass

        def submit(self, fn: object, *args: object) -> cf.Future:
            future: cf.Future = cf.Future()
            future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            return future

    monkeypatch.setattr(cf, "ProcessPoolExecutor", BrokenPool)
    points = [(0, Point((("engine.max_num_seqs", 4),), None)), (1, Point((), None))]
    got = dict(run_local(str(tmp_path / "base.yaml"), points, parallel=2))
    assert sorted(got) == [0, 1]
    assert [got[i]["status"] for i in (0, 1)] == ["failed", "failed"]
    assert got[0]["error"] == "BrokenProcessPool: a child process terminated abruptly"
    assert got[0]["overrides"] == {"engine.max_num_seqs": 4} and got[1]["id"] == points[1][1].id


def test_a_sweep_whose_every_point_failed_exits_1(tmp_path, capsys) -> None:
    (tmp_path / "base.yaml").write_text("workload: {synthetic: {num_requests: 4, rate: 16}}\n")
    path = tmp_path / "sweep.yaml"
    path.write_text("base: base.yaml\ngrid:\n  workload.trace.path: [a.jsonl, b.jsonl]\n"
                    "  workload.synthetic: [null]\n")
    out_dir = tmp_path / "o"
    assert main(["sweep", str(path), "--out", str(out_dir), "--parallel", "1"]) == 1
    captured = capsys.readouterr()
    assert "2 points (2 failed)" in captured.out
    assert captured.err.count("failed: TraceError") == 2
    records = [json.loads(p.read_text()) for p in sorted((out_dir / "points").glob("*.json"))]
    assert [r["status"] for r in records] == ["failed", "failed"]
    assert (out_dir / "results.csv").read_text().count("\n") == 3
