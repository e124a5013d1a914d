"""SLA attainment per interval (``elastic.intervals``, servesim.replay.elastic_intervals): per
planner tick, the requests that arrived, completed and failed, the share that met the SLAs,
and the interval's p99 TTFT."""

from __future__ import annotations

from elastic_cases import run
from servesim.report.percentiles import percentile

# One worker of 8 sequences under 160 requests at 80/s: a queue builds; a crash at 0.5 s
# loses that worker's requests until it restarts (no retries, so they fail).
BURST = """cluster: {workers: 1, router: round_robin}
report: {sla_ttft_ms: 200.0}
planner: {type: static, interval_s: 0.5}
lifecycle: {startup_s: 0.1}
faults: {restart_s: 0.2, crashes: [{at_s: 0.5, worker: 0}]}
"""


def test_each_interval_counts_its_arrivals_and_judges_them_by_the_slas(tmp_path):
    result = run(tmp_path, BURST, n=160, rate=80.0, seqs=8)
    rows = result.report["elastic"]["intervals"]
    log = result.log
    assert [r["start_ms"] for r in rows] == [500.0 * k for k in range(len(rows))]
    assert rows[-1]["start_ms"] <= max(log.done) < rows[-1]["start_ms"] + 500.0
    for k, row in enumerate(rows):
        mine = [i for i in range(log.n) if 500.0 * k <= log.arrival[i] < 500.0 * (k + 1)]
        done = [i for i in mine if log.done[i] >= 0.0 and not log.rejected[i]]
        good = [i for i in done if log.first[i] - log.arrival[i] <= 200.0]
        assert (row["arrived"], row["completed"], row["failed"]) == (
            len(mine), len(done), len(mine) - len(done))
        assert row["sla_attainment"] == (round(len(good) / len(mine), 6) if mine else None)
        ttft = sorted(log.first[i] - log.arrival[i] for i in done)
        assert row["p99_ttft_ms"] == (round(percentile(ttft, 99.0), 6) if ttft else None)
    assert sum(r["arrived"] for r in rows) == 160
    # the crash fails the requests in flight at 0.5 s; the queue built later misses the SLA
    assert [(r["arrived"], r["failed"], r["sla_attainment"]) for r in rows] == [
        (36, 15, 0.583333), (39, 0, 1.0), (27, 0, 1.0), (43, 0, 0.697674), (15, 0, 0.0),
        (0, 0, None)]


def test_without_slas_attainment_is_null(tmp_path):
    result = run(tmp_path, "planner: {type: static, interval_s: 1.0}\n", n=40, rate=40.0)
    rows = result.report["elastic"]["intervals"]
    assert rows and all(r["sla_attainment"] is None for r in rows)
    assert sum(r["completed"] for r in rows) == 40
