"""The elastic figure (servesim_plot.elastic): workers per pool by state over simulated time
from the report's ``elastic.workers[*].states``, arrivals and p99 TTFT per interval from the
per-request times, the same from a run and from its saved files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim_plot import elastic as E
from servesim_plot.data import PlotData, RequestTable, from_sim
from servesim_plot.files import load

CONFIG = """
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 2000
  timing_model: {type: fixed, prefill_ms: 8.0, decode_ms: 2.0}
workload:
  synthetic: {num_requests: 160, rate: 50.0, input_length: "uniform:64:512",
              output_length: "uniform:8:64", block_size: 16}
cluster: {workers: 2, router: kv}
planner:
  type: schedule
  steps: [{at_s: 0.5, workers: 4}, {at_s: 2.0, workers: 1}]
lifecycle:
  startup_s: 0.25
  warmup: {duration_s: 0.5, factor: 2.0}
  drain: wait
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "elastic.yaml"
    path.write_text(CONFIG)
    return path


def test_workers_by_state_follow_the_lifecycle(config) -> None:
    result = simulate(load_config(str(config)))
    series = E.elastic_series(from_sim(result, None))
    assert series is not None
    (pool,) = series.pools
    workers = {w["worker"]: w for w in result.report["elastic"]["workers"]}
    # worker 1 drains until its last request ends; workers 2 and 3 hold none at 2 s
    stop1 = workers[1]["stopped_ms"]
    assert 2000.0 < stop1 == pytest.approx(max(d for d, w in zip(result.log.done, result.log.worker,
                                                                  strict=True) if w == 1), abs=1e-6)
    assert pool.name == "default" and pool.t_ms.tolist() == [0.0, 500.0, 750.0, 1250.0, 2000.0, stop1]
    got = {s: pool.counts[s].tolist() for s in E.STATES}
    assert got == {"ready": [2, 2, 2, 4, 1, 1], "warmup": [0, 0, 2, 0, 0, 0],
                   "starting": [0, 2, 0, 0, 0, 0], "draining": [0, 0, 0, 0, 1, 0],
                   "restarting": [0, 0, 0, 0, 0, 0]}
    assert workers[2]["states"] == [[500.0, "starting"], [750.0, "warmup"], [1250.0, "ready"],
                                    [2000.0, "draining"], [2000.0, "stopped"]]


def test_load_and_p99_ttft_per_interval(config, monkeypatch) -> None:
    result = simulate(load_config(str(config)))
    data = from_sim(result, None)
    series = E.elastic_series(data)
    assert series is not None and series.arrivals_per_s is not None and series.p99_ttft_ms is not None
    log = result.log
    end = max(log.done)
    # the end is the report's duration_ms (rounded to 1e-6 ms); end / 40 rounds up to 100 ms
    assert series.end_ms == pytest.approx(end, abs=1e-6) and series.interval_ms == 100.0
    assert len(series.starts_ms) == math.ceil(end / 100.0)
    counts = [0] * len(series.starts_ms)
    for t in log.arrival:
        counts[int(t // 100.0)] += 1
    assert (series.arrivals_per_s / 10.0).tolist() == counts  # per second over 0.1 s
    assert sum(counts) == result.report["elastic"]["requests"]["submitted"] == 160
    # one interval for the whole replay: its p99 is the report's
    monkeypatch.setattr(E, "MAX_INTERVALS", 1)
    whole = E.elastic_series(data)
    assert whole is not None and whole.p99_ttft_ms is not None and len(whole.p99_ttft_ms) == 1
    assert whole.p99_ttft_ms[0] == pytest.approx(result.report["p99_ttft_ms"], abs=1e-6)


def _report(states: list[list[object]], **extra: object) -> dict:
    return {"completed": 0, "duration_ms": 900.0, **extra,
            "elastic": {"pools": [{"name": "p"}],
                        "workers": [{"worker": 0, "pool": "p", "states": states}]}}


def test_p99_is_the_nearest_rank_of_each_intervals_arrivals() -> None:
    # four requests: three arrive in [0, 50) ms with TTFTs 10, 30, 20 ms; none in the
    # intervals after; the fourth arrives at 950 ms and is rejected (no TTFT)
    arrival = np.array([0.0, 5.0, 24.0, 950.0])
    first = np.array([10.0, 35.0, 44.0, -1.0])
    req = RequestTable(arrival=arrival, first=first, last=first, done=np.array([10.0, 35.0, 44.0, 951.0]),
                       ntok=np.array([1, 1, 1, 0]), input_length=np.zeros(4, dtype=np.int64),
                       reused=np.zeros(4, dtype=np.int64), worker=np.zeros(4, dtype=np.int64),
                       rejected=np.array([False, False, False, True]), itl=None)
    series = E.elastic_series(PlotData(_report([[0.0, "ready"]], sla={"ttft_ms": 25.0}), req))
    assert series is not None and series.p99_ttft_ms is not None and series.arrivals_per_s is not None
    assert series.interval_ms == 50.0 and len(series.starts_ms) == 20  # 951 / 40 -> 50 ms
    assert series.p99_ttft_ms[0] == 30.0 and np.isnan(series.p99_ttft_ms[1:]).all()
    assert series.arrivals_per_s.tolist() == [60.0] + [0.0] * 18 + [20.0]
    assert series.sla_ttft_ms == 25.0


@pytest.mark.parametrize(("span", "step"), [(1.0, 0.05), (951.0, 50.0), (3724.5, 100.0),
                                            (180_000.0, 5000.0), (400_000.0, 10_000.0)])
def test_intervals_are_one_two_five_steps(span, step) -> None:
    assert E.interval_ms(span) == pytest.approx(step)
    assert span / E.interval_ms(span) <= E.MAX_INTERVALS


def test_a_restart_counts_as_restarting_then_starting() -> None:
    states = [[0.0, "ready"], [100.0, "restarting"], [400.0, "starting"], [600.0, "ready"]]
    series = E.elastic_series(PlotData(_report(states)))
    assert series is not None and series.arrivals_per_s is None and series.end_ms == 900.0
    (pool,) = series.pools
    assert pool.t_ms.tolist() == [0.0, 100.0, 400.0, 600.0]
    assert [int(pool.counts[s].sum()) for s in ("ready", "restarting", "starting")] == [2, 1, 1]
    assert pool.counts["restarting"].tolist() == [0, 1, 0, 0]


def test_saved_files_give_the_runs_series_and_figure(config, tmp_path, capsys) -> None:
    rep, req, figs = tmp_path / "r.json", tmp_path / "r.jsonl", tmp_path / "figs"
    assert main(["run", str(config), "--quiet", "--output-json", str(rep), "--per-request", str(req)]) == 0
    live = E.elastic_series(from_sim(simulate(load_config(str(config))), None))
    saved = E.elastic_series(load(str(rep), str(req)))
    assert live is not None and saved is not None
    assert [p.t_ms.tolist() for p in saved.pools] == [p.t_ms.tolist() for p in live.pools]
    assert saved.arrivals_per_s is not None and live.arrivals_per_s is not None
    assert saved.arrivals_per_s.tolist() == live.arrivals_per_s.tolist()
    assert np.allclose(saved.p99_ttft_ms, live.p99_ttft_ms, rtol=0, atol=3e-6, equal_nan=True)
    assert main(["plot", str(rep), "--per-request", str(req), "-o", str(figs)]) == 0
    assert f"{figs / 'elastic.png'}\n" in capsys.readouterr().out
    assert (figs / "elastic.png").read_bytes().startswith(b"\x89PNG")
    # a report without worker states (an older servesim) draws no elastic figure; a broken
    # one is a one-line error naming the file
    report = json.loads(rep.read_text())
    for w in report["elastic"]["workers"]:
        del w["states"]
    rep.write_text(json.dumps(report))
    assert main(["plot", str(rep), "-o", str(tmp_path / "old")]) == 0
    assert not (tmp_path / "old" / "elastic.png").exists()
    report["elastic"]["workers"][0]["states"] = [[0.0]]
    rep.write_text(json.dumps(report))
    capsys.readouterr()
    assert main(["plot", str(rep), "-o", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.startswith(f"servesim: error: {rep}: 'elastic' must hold 'pools'")


def test_the_figure_draws_the_series(config) -> None:
    from servesim_plot.draw import elastic_figure

    result = simulate(load_config(str(config)))
    series = E.elastic_series(from_sim(result, None))
    assert series is not None and series.p99_ttft_ms is not None
    fig = elastic_figure(series)
    ax_workers, ax_load, ax_ttft = fig.axes
    # the stacked areas' top edge is the pool's active worker count at each change
    tops = [c.get_paths()[0].vertices[:, 1].max() for c in ax_workers.collections]
    assert [c.get_label() for c in ax_workers.collections] == ["ready", "warmup", "starting", "draining"]
    assert max(tops) == 4.0
    (stairs,) = ax_load.patches
    assert np.array_equal(stairs.get_data().values, series.arrivals_per_s)
    (line,) = ax_ttft.lines
    assert np.array_equal(line.get_ydata(), series.p99_ttft_ms, equal_nan=True)
