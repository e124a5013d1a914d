"""Figure data of a replay (servesim_plot): the arrays the figures draw, pinned against the
report, against stepping, and against the files a run writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim.report.summary import dumps
from servesim_plot import series as S
from servesim_plot.data import RequestTable, from_sim
from servesim_plot.files import load
from servesim_plot.timeline import COLUMNS, TimelineRecorder

SMALL = ["workload.synthetic.num_requests=120", "workload.synthetic.rate=12"]
KV4 = [*SMALL, "cluster.workers=4", "cluster.router=kv", "workload.synthetic.rate=40"]
TIGHT = [*SMALL, "engine.num_gpu_blocks=120", "workload.synthetic.rate=40"]
DP2 = [*SMALL, "engine.dp_size=2", "workload.synthetic.rate=30"]
SPLIT = ["workload.synthetic.num_requests=60", "workload.synthetic.rate=20",
         "cluster.prefill_workers=1", "cluster.decode_workers=2", "engine.num_gpu_blocks=300"]


def _run(sets: list[str], monkeypatch: pytest.MonkeyPatch, runs: bool = True,
         timeline: bool = True):
    monkeypatch.setenv("SERVESIM_RUNS", "1" if runs else "0")
    rec = TimelineRecorder() if timeline else None
    result = simulate(load_config(None, sets), timeline=rec, record_token_times=False)
    return result, rec


def _requests(result, rec) -> RequestTable:
    req = from_sim(result, rec).requests
    assert req is not None
    return req


def _columns(rec: TimelineRecorder) -> dict:
    return {key: {n: list(rank.columns[n]) for n in COLUMNS} | {"pre": list(rank.preempt_ms)}
            for key, rank in rec.ranks.items()}


@pytest.mark.parametrize("sets", [SMALL, KV4, TIGHT, DP2, SPLIT],
                         ids=["1w", "4w-kv", "tight", "dp2", "split"])
def test_timeline_is_the_same_with_runs_and_stepping(sets, monkeypatch) -> None:
    from servesim.fast.engine_runs import RunEngine

    started = []
    original = RunEngine.execute_run

    def counting(self, *a, **k):
        run = original(self, *a, **k)
        started.append(run is not None)
        return run

    monkeypatch.setattr(RunEngine, "execute_run", counting)
    with_runs, rec_runs = _run(sets, monkeypatch, runs=True)
    if sets is not SPLIT and sets is not DP2:  # these decline runs and step
        assert any(started), "no run was taken: the comparison would prove nothing"
    stepped, rec_steps = _run(sets, monkeypatch, runs=False)
    assert _columns(rec_runs) == _columns(rec_steps)
    assert dumps(with_runs.report) == dumps(stepped.report)


@pytest.mark.parametrize("sets", [SMALL, KV4, TIGHT, DP2, SPLIT],
                         ids=["1w", "4w-kv", "tight", "dp2", "split"])
def test_collecting_the_timeline_leaves_the_report_unchanged(sets, monkeypatch) -> None:
    plain, _ = _run(sets, monkeypatch, timeline=False)
    plotted, rec = _run(sets, monkeypatch)
    assert dumps(plain.report) == dumps(plotted.report)
    ranks = rec.ranks
    # one row per pass and rank; preemption marks are the report's count
    assert sum(len(r.columns["end_ms"]) for r in ranks.values()) >= plotted.passes
    assert sum(len(r.preempt_ms) for r in ranks.values()) == plotted.report["num_preemptions"]
    for rank in ranks.values():
        ends = np.asarray(rank.columns["end_ms"])
        assert (np.diff(ends) >= 0).all()
        usage = np.asarray(rank.columns["kv_usage"])
        assert ((usage >= 0) & (usage <= 1)).all()


def test_tight_pool_preempts_and_fills_the_cache(monkeypatch) -> None:
    result, rec = _run(TIGHT, monkeypatch)
    assert result.report["num_preemptions"] > 0
    data = from_sim(result, rec)
    tl = S.rank_timeline(data, ("0", 0))
    assert len(tl.preempt_ms) == result.report["num_preemptions"]
    assert tl.kv_usage is not None and tl.kv_usage.max() > 0.9
    assert tl.waiting.max() > 0
    assert len(tl.arrivals_ms) == 120 and (np.diff(tl.arrivals_ms) >= 0).all()
    # every pass's batch tokens are its prefill tokens plus one per decode request
    assert tl.batch_tokens.min() >= 1


def test_cdf_marks_are_the_reports_percentiles(monkeypatch) -> None:
    result, rec = _run(KV4, monkeypatch)
    rep = result.report
    cdfs = S.latency_cdfs(from_sim(result, rec))
    for metric in S.METRICS:
        cdf = cdfs[metric]
        assert cdf is not None and cdf.exact
        assert (np.diff(cdf.x) > 0).all() and cdf.y[-1] == pytest.approx(1.0)
        assert (np.diff(cdf.y) > 0).all()
        for p in (50, 90, 99):
            assert cdf.marks[float(p)] == pytest.approx(rep[f"p{p}_{metric}_ms"], abs=1e-6)
    ttft = cdfs["ttft"]
    assert ttft is not None and len(ttft.x) <= rep["completed"]


def test_weighted_cdf_counts_weights() -> None:
    cdf = S.weighted_cdf(np.array([3.0, 1.0, 2.0, 1.0]), np.array([1, 2, 1, 6]))
    assert cdf.x.tolist() == [1.0, 2.0, 3.0]
    assert cdf.y.tolist() == [0.8, 0.9, 1.0]
    # nearest rank over 10 samples: p50 -> index 5 (value 1), p90 -> 8 (2), p99 -> 9 (3)
    assert cdf.marks == {50.0: 1.0, 90.0: 2.0, 99.0: 3.0}


def test_report_only_cdf_uses_the_report_percentiles() -> None:
    report = {"percentiles": [50, 90, 99], "p50_ttft_ms": 10.0, "p90_ttft_ms": 30.0,
              "p99_ttft_ms": 70.0}
    cdf = S.report_cdf(report, "ttft")
    assert cdf is not None and not cdf.exact
    assert cdf.x.tolist() == [10.0, 30.0, 70.0] and cdf.y.tolist() == [0.5, 0.9, 0.99]
    assert S.report_cdf(report, "tpot") is None


def test_split_breakdown_sums_to_ttft_and_matches_the_report(monkeypatch) -> None:
    result, rec = _run(SPLIT, monkeypatch)
    req = _requests(result, rec)
    b = S.ttft_breakdown(req)
    assert b is not None and len(b.prefill) == result.report["num_handoffs"]
    rep = result.report
    assert b.prefill.mean() == pytest.approx(rep["mean_ttft_prefill_ms"], abs=1e-5)
    assert b.transfer.mean() == pytest.approx(rep["mean_ttft_transfer_ms"], abs=1e-5)
    assert b.decode.mean() == pytest.approx(rep["mean_ttft_decode_ms"], abs=1e-5)
    data = from_sim(result, rec)
    assert [S.worker_role(data, w) for w in S.workers_of(data)] == ["prefill", "decode", "decode"]
    bal = S.worker_balance(req)
    assert bal.workers.tolist() == [0, 1, 2]
    done = rep["completed"]
    assert bal.requests[0] == done and bal.requests[1] + bal.requests[2] == done
    assert bal.hit_rate[0] == pytest.approx(rep["prefix_cache_hit_rate"], abs=1e-6)
    assert np.isnan(bal.hit_rate[1:]).all()
    total = b.prefill + b.transfer + b.decode
    assert (np.diff(total) >= -1e-9).all()  # sorted by TTFT
    assert total.mean() == pytest.approx(rep["mean_ttft_ms"], abs=1e-5)


def test_worker_balance_adds_up_to_the_report(monkeypatch) -> None:
    result, rec = _run(KV4, monkeypatch)
    bal = S.worker_balance(_requests(result, rec))
    assert bal.workers.tolist() == [0, 1, 2, 3]
    assert int(bal.requests.sum()) == result.report["completed"]
    log = result.log
    prompt = np.array([sum(n for n, w in zip(log.input_length, log.worker, strict=True) if w == k)
                       for k in range(4)])
    weighted = float((bal.hit_rate * prompt).sum() / prompt.sum())
    assert weighted == pytest.approx(result.report["prefix_cache_hit_rate"], abs=1e-6)


def test_saved_files_give_the_runs_figure_data(tmp_path, monkeypatch) -> None:
    """`servesim plot` on the files of a run reads back the arrays `run --plot` drew."""
    monkeypatch.setenv("SERVESIM_RUNS", "1")
    rep, req, fpm = tmp_path / "r.json", tmp_path / "r.jsonl", tmp_path / "f.jsonl"
    sets = [*TIGHT, f"sinks.fpm=[{{type: jsonl, path: {json.dumps(str(fpm))}}}]"]
    args = ["run", "--quiet", "--output-json", str(rep), "--per-request", str(req)]
    assert main([*args, *sum((["--set", s] for s in sets), [])]) == 0
    saved = load(str(rep), str(req), str(fpm))
    result, rec = _run(TIGHT, monkeypatch)
    live = from_sim(result, rec)
    # the files round times to 1e-6 ms: the same samples, to that rounding
    assert saved.requests is not None and live.requests is not None
    saved_samples = S.latency_samples(saved.requests)
    for metric, sample in S.latency_samples(live.requests).items():
        other = saved_samples[metric]
        assert sample is not None and other is not None
        a, b = (np.sort(np.repeat(v, w)) for v, w in (sample, other))
        assert len(a) == len(b) and np.allclose(a, b, rtol=0, atol=3e-6), metric
        marks = S.weighted_cdf(*other).marks
        for p, v in S.weighted_cdf(*sample).marks.items():
            assert marks[p] == pytest.approx(v, abs=3e-6)
    assert list(saved.ranks) == list(live.ranks)
    for key, rank in live.ranks.items():
        for name in COLUMNS[:-1]:
            got, want = saved.ranks[key].columns[name], rank.columns[name]
            if name == "duration_ms":  # the wire schema's wall_time is in seconds
                assert np.allclose(got, want, rtol=1e-12, atol=0), name
            else:
                assert got.tolist() == want.tolist(), name
    # an FPM file has no preemption event: they are read from the queued decode counts
    inferred = saved.ranks[("0", 0)].preempt_ms
    assert 0 < len(inferred) <= result.report["num_preemptions"]


def test_figures_draw_the_series(monkeypatch) -> None:
    """The lines in the figures are the series' arrays: CDFs (and a compared run's), SLA
    thresholds, and each rank's running and waiting counts."""
    from servesim_plot.draw import latency_figure, timeline_figure

    sla = [*TIGHT, "report.sla_ttft_ms=300"]
    result, rec = _run(sla, monkeypatch)
    data = from_sim(result, rec)
    other, other_rec = _run(SMALL, monkeypatch)
    compare = from_sim(other, other_rec)
    compare.label = "other"
    fig = latency_figure(data, compare)
    mine, theirs = S.latency_cdfs(data), S.latency_cdfs(compare)
    for ax, metric in zip(fig.axes, S.METRICS, strict=True):
        lines = {ln.get_label(): ln for ln in ax.lines}
        assert np.array_equal(lines["run"].get_xdata(), mine[metric].x)
        assert np.array_equal(lines["run"].get_ydata(), mine[metric].y)
        assert np.array_equal(lines["other"].get_xdata(), theirs[metric].x)
        sla_lines = [ln for name, ln in lines.items() if name.startswith("SLA")]
        assert [list(ln.get_xdata()) for ln in sla_lines] == ([[300.0, 300.0]]
                                                               if metric == "ttft" else [])
    tl = S.rank_timeline(data, ("0", 0))
    lines = {ln.get_label(): ln for ln in timeline_figure(data, "0").axes[0].lines}
    assert np.array_equal(lines["running"].get_xdata(), tl.t_ms / 1000.0)
    assert np.array_equal(lines["running"].get_ydata(), tl.running)
    assert np.array_equal(lines["waiting"].get_ydata(), tl.waiting)
    assert len(lines["preemption"].get_xdata()) == result.report["num_preemptions"]
    assert np.array_equal(lines["arrival"].get_xdata(), tl.arrivals_ms / 1000.0)
