"""Lifecycle, planner and faults in a prefill/decode split (servesim.replay.elastic_split).

Fixed timing (prefill 10 ms, decode 2 ms), a 5 ms handoff and two-block prompts keep the
timestamps hand-checkable, as in test_disagg.py: a request arriving at ``t`` on an idle split
is prefilled by ``t + 10``, reserved at once, transferred by ``t + 15`` and decoded from then
on, 2 ms a token, its first token at ``t + 17``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from servesim.config.loader import load_config
from servesim.errors import ConfigError, ReplayError
from servesim.replay.elastic_setup import build_elastic_split
from servesim.replay.planning import Planner
from servesim.replay.runner import load_workload, simulate
from servesim.report.summary import dumps
from test_disagg import write_trace


def config(tmp_path: Path, rows: list[tuple[int, int, int]], extra: str, *,
           backend: str = "vllm", prefill: int = 1, decode: int = 1,
           engine: dict[str, Any] | None = None) -> str:
    trace = write_trace(tmp_path / "t.jsonl", rows)
    cfg = {
        "engine": {"backend": backend, "block_size": 16, "num_gpu_blocks": 64,
                   "timing_model": {"type": "fixed", "prefill_ms": 10.0, "decode_ms": 2.0}},
        "cluster": {"prefill_workers": prefill, "decode_workers": decode, "router": "kv",
                    "handoff_latency_ms": 5.0},
        "workload": {"trace": {"path": trace, "trace_block_size": 16}},
    }
    cfg["engine"].update(engine or {})
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(cfg) + extra)
    return str(path)


def run(tmp_path: Path, rows: list[tuple[int, int, int]], extra: str, **kw: Any) -> Any:
    return simulate(load_config(config(tmp_path, rows, extra, **kw)), record_token_times=True)


def ticks(first: float, n: int) -> list[float]:
    return [first + 2.0 * k for k in range(n)]


def accounting(report: dict[str, Any]) -> tuple[int, int, int, int]:
    req = report["elastic"]["requests"]
    return req["submitted"], req["completed"], req["failed"], req["rejected"]


# --------------------------------------------------------------------------- KV transfers


def transfer(fallback: str, retries: int, attempts: int = 0) -> str:
    return (f"lifecycle: {{retry: {{max_attempts: {attempts}, backoff_s: 0.05}}}}\n"
            f"faults: {{kv_transfer: {{failures: [{{request: 0, count: 1}}], max_retries: {retries},"
            f" fallback: {fallback}}}}}\n")


def test_a_failed_transfer_is_tried_again(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 32, 3)], transfer("fail", 1))
    ex = res.log.extra
    # fails at 15, tried again: 15 -> 20
    assert (ex["source_held_ms"][0], ex["destination_activated_ms"][0]) == (10.0, 20.0)
    assert ex["source_released_ms"][0] == 20.0
    assert res.log.token_times[0] == ticks(22.0, 3)
    faults = res.report["elastic"]["faults"]
    assert (faults["kv_transfer_failures"], faults["kv_transfer_retries"],
            faults["local_prefills"], faults["kv_transfer_lost"]) == (1, 1, 0, 0)
    assert accounting(res.report) == (1, 1, 0, 0)


def test_a_failed_transfer_falls_back_to_a_local_prefill(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 32, 3)], transfer("local_prefill", 0))
    ex = res.log.extra
    # fails at 15; the decode worker prefills the 32 missing tokens (10 ms), activates at 25
    assert ex["destination_activated_ms"][0] == 25.0 and ex["source_released_ms"][0] == 25.0
    assert res.log.token_times[0] == ticks(27.0, 3)
    faults = res.report["elastic"]["faults"]
    assert (faults["kv_transfer_failures"], faults["local_prefills"]) == (1, 1)
    pools = {p["name"]: p for p in res.report["elastic"]["pools"]}
    assert pools["decode"]["busy_gpu_seconds"] == pytest.approx((10.0 + 3 * 2.0) / 1000.0)
    assert pools["prefill"]["busy_gpu_seconds"] == pytest.approx(10.0 / 1000.0)


def test_a_request_lost_to_a_failed_transfer_is_sent_again(tmp_path: Path) -> None:
    res = run(tmp_path, [(0, 32, 3)], transfer("fail", 0, attempts=1))
    ex = res.log.extra
    # lost at 15, sent again at 65: prefilled by 75, transferred by 80 (its second
    # transfer succeeds), first token at 82; its arrival is still 0
    assert (ex["source_held_ms"][0], ex["destination_activated_ms"][0]) == (75.0, 80.0)
    assert res.log.token_times[0] == ticks(82.0, 3) and res.log.arrival[0] == 0.0
    el = res.report["elastic"]
    assert el["faults"]["kv_transfer_lost"] == 1 and el["requests"]["retried"] == 1
    assert accounting(res.report) == (1, 1, 0, 0)
    failed = run(tmp_path, [(0, 32, 3)], transfer("fail", 0))
    assert accounting(failed.report) == (1, 0, 1, 0) and failed.log.ntok == [0]


def test_kv_transfer_failures_need_a_split(tmp_path: Path) -> None:
    path = tmp_path / "agg.yaml"
    path.write_text("cluster: {workers: 1}\nfaults: {kv_transfer: {failure_rate: 0.5}}\n")
    with pytest.raises(ConfigError) as err:
        simulate(load_config(str(path)))
    assert err.value.path == "faults.kv_transfer"
    path.write_text("faults: {kv_transfer: {failure_rate: 1.5, max_retries: -1}}\n")
    with pytest.raises(ConfigError, match="faults.kv_transfer.failure_rate"):
        load_config(str(path))


def test_random_transfer_failures_follow_the_seed(tmp_path: Path) -> None:
    rows = [(5 * i, 32, 4) for i in range(30)]

    def failures(seed: int) -> tuple[Any, ...]:
        extra = (f"faults: {{seed: {seed}, kv_transfer: {{failure_rate: 0.3, max_retries: 1,"
                 f" fallback: local_prefill}}}}\n")
        res = run(tmp_path, rows, extra)
        f = res.report["elastic"]["faults"]
        return (f["kv_transfer_failures"], f["kv_transfer_retries"], f["local_prefills"],
                res.log.done)

    assert failures(3) == failures(3)
    assert failures(3) != failures(4)
    first = failures(3)
    assert first[0] == first[1] + first[2] > 0 and first[2] > 0


# --------------------------------------------------------------------------- crashes


def test_a_decode_crash_loses_its_requests_and_they_start_over(tmp_path: Path) -> None:
    extra = ("lifecycle: {startup_s: 0.01, retry: {max_attempts: 1, backoff_s: 0}}\n"
             "faults: {restart_s: 0.02, crashes: [{at_s: 0.03, worker: 1}]}\n")
    res = run(tmp_path, [(0, 32, 20)], extra)
    ex = res.log.extra
    # lost at 30 and sent again: prefilled 30 -> 40; the decode worker restarts at 50 and
    # serves from 60, so the held source waits for it: reserved at 60, activated at 65
    assert (ex["source_held_ms"][0], ex["destination_reserved_ms"][0],
            ex["destination_activated_ms"][0], ex["source_released_ms"][0]) == (40.0, 60.0, 65.0, 65.0)
    assert res.log.token_times[0] == ticks(67.0, 20)
    el = res.report["elastic"]
    assert (el["faults"]["crashes"], el["faults"]["requests_lost"], el["faults"]["restarts"]) == (1, 1, 1)
    assert el["workers"][1]["ready_ms"] == 60.0 and el["workers"][1]["crashes"] == 1
    assert accounting(res.report) == (1, 1, 0, 0) and el["requests"]["retried"] == 1


def test_a_prefill_crash_spares_requests_whose_kv_left(tmp_path: Path) -> None:
    rows = [(0, 32, 10), (12, 32, 10)]
    extra = ("lifecycle: {retry: {max_attempts: 1, backoff_s: 0}}\n"
             "faults: {restart_s: 0.01, crashes: [{at_s: 0.018, worker: 0}]}\n")
    plain = run(tmp_path, rows, "faults: {}\n")
    res = run(tmp_path, rows, extra)
    # request 0 was activated at 15 (its source release waited for the pass 12 -> 22):
    # it decodes on; request 1, mid-prefill, is lost and prefilled again from 28
    assert res.log.token_times[0] == plain.log.token_times[0] == ticks(17.0, 10)
    ex = res.log.extra
    assert ex["source_released_ms"][0] == -1.0  # its source went with the crash
    assert (ex["source_held_ms"][1], ex["destination_activated_ms"][1]) == (38.0, 43.0)
    assert res.log.token_times[1] == ticks(45.0, 10)
    el = res.report["elastic"]
    assert el["faults"]["requests_lost"] == 1 and accounting(res.report) == (2, 2, 0, 0)


def test_an_immediate_removal_fails_the_decode_workers_requests(tmp_path: Path) -> None:
    rows = [(0, 32, 30), (1, 32, 30)]
    extra = ("lifecycle: {drain: immediate}\n"
             "planner: {type: schedule, steps: [{at_s: 0.04, workers: 1, pool: decode}]}\n")
    res = run(tmp_path, rows, extra, decode=2)
    el = res.report["elastic"]
    assert el["scaling"] == [{"t_ms": 40.0, "pool": "decode", "action": "remove", "worker": 2,
                              "reason": "schedule"}]
    assert el["workers"][2]["stopped_ms"] == 40.0
    lost = [rid for rid in range(2) if res.log.rejected[rid]]
    assert [res.log.worker[rid] for rid in lost] == [2]
    assert accounting(res.report) == (2, 1, 1, 0)


# --------------------------------------------------------------------------- lifecycle, planner


def test_a_redirecting_prefill_worker_hands_back_its_waiting_requests(tmp_path: Path) -> None:
    extra = ("lifecycle: {drain: redirect}\n"
             "planner: {type: schedule, steps: [{at_s: 0.005, workers: 1, pool: prefill}]}\n")
    res = run(tmp_path, [(0, 32, 3)] * 6, extra, prefill=2, engine={"max_num_seqs": 1})
    el = res.report["elastic"]
    # one prefill at a time per worker: worker 1 runs request 1 and holds 3 and 5 waiting;
    # removed at 5, it hands them to worker 0, where they queue behind 2 and 4
    assert el["requests"]["redirected"] == 2 and accounting(res.report) == (6, 6, 0, 0)
    ex = res.log.extra
    assert ex["prefill_worker"] == [0, 1, 0, 0, 0, 0]
    assert ex["prefill_admit_ms"] == [0.0, 0.0, 10.0, 30.0, 20.0, 40.0]
    # it stops once request 1's source is released (activated at 15, the worker idle)
    assert ex["source_released_ms"][1] == 15.0 and el["workers"][1]["stopped_ms"] == 15.0


def test_a_redirecting_decode_worker_hands_back_its_pending_reservations(tmp_path: Path) -> None:
    extra = ("lifecycle: {drain: redirect}\n"
             "planner: {type: schedule, steps: [{at_s: 0.025, workers: 0, pool: decode},"
             " {at_s: 0.03, workers: 1, pool: decode}]}\n")
    path = config(tmp_path, [(0, 32, 20), (1, 32, 3)], extra)
    loaded = load_config(path, ["cluster.decode_engine.num_gpu_blocks=4"])  # 4 KV blocks
    res = simulate(loaded, record_token_times=True)
    ex, el = res.log.extra, res.report["elastic"]
    # request 1's reservation (at 20) waits on worker 1, which request 0 fills; removed at
    # 25, worker 1 hands it back: no decode worker is ready until worker 2 at 30, where it is
    # reserved, transferred by 35 and decoded; worker 1 stops after request 0's last token
    assert el["requests"]["redirected"] == 1 and accounting(res.report) == (2, 2, 0, 0)
    assert ex["destination_reserved_ms"] == [10.0, 30.0] and res.log.worker == [1, 2]
    assert res.log.token_times[1] == ticks(37.0, 3) and res.log.token_times[0] == ticks(17.0, 20)
    assert el["workers"][1]["stopped_ms"] == 55.0 and el["workers"][2]["ready_ms"] == 30.0


def test_a_decode_worker_added_by_schedule_starts_warms_up_and_serves(tmp_path: Path) -> None:
    rows = [(20 * i, 32, 4) for i in range(10)]
    extra = ("lifecycle: {startup_s: 0.05, warmup: {duration_s: 0.05, factor: 2.0}}\n"
             "planner: {type: schedule, steps: [{at_s: 0, workers: 2, pool: decode},"
             " {at_s: 0.12, workers: 1, pool: prefill}]}\n")
    res = run(tmp_path, rows, extra, prefill=2)
    el = res.report["elastic"]
    assert [(a["t_ms"], a["pool"], a["action"], a["worker"]) for a in el["scaling"]] == [
        (0.0, "decode", "add", 3), (120.0, "prefill", "remove", 1)]
    w3 = el["workers"][3]
    assert (w3["added_ms"], w3["ready_ms"], w3["state"]) == (0.0, 50.0, "ready")
    log = res.log
    on3 = [rid for rid in range(log.n) if log.worker[rid] == 3]
    assert on3 and min(log.extra["destination_reserved_ms"][rid] for rid in on3) >= 50.0
    # request 4, activated at 95 on the warming-up worker: its passes starting before 100
    # take 4 ms, the later ones 2 ms
    assert on3[0] == 4 and log.token_times[4] == [99.0, 103.0, 105.0, 107.0]
    assert log.token_times[5] == ticks(117.0, 4) and log.worker[5] == 2
    # prefill worker 1 drains at 120 (it holds no request then) and takes no request after
    assert el["workers"][1]["stopped_ms"] == 120.0 and el["workers"][1]["state"] == "stopped"
    assert all(log.extra["prefill_worker"][rid] == 0 for rid in range(log.n) if log.arrival[rid] >= 120.0)
    assert accounting(res.report) == (10, 10, 0, 0)


def test_a_split_left_without_a_prefill_worker_stops_with_an_error(tmp_path: Path) -> None:
    extra = "planner: {type: schedule, steps: [{at_s: 0.03, workers: 0, pool: prefill}]}\n"
    with pytest.raises(ReplayError, match="the planner left 1 requests waiting"):
        run(tmp_path, [(0, 32, 3), (40, 32, 3)], extra)


def test_gpu_seconds_per_pool_and_arrivals_wait_for_a_prefill_worker(tmp_path: Path) -> None:
    rows = [(0, 32, 3), (30, 32, 3)]
    extra = ("lifecycle: {startup_s: 0.02}\n"
             "planner: {type: schedule, steps: [{at_s: 0.02, workers: 0, pool: prefill},"
             " {at_s: 0.025, workers: 1, pool: prefill}]}\n")
    res = run(tmp_path, rows, extra)
    el = res.report["elastic"]
    # worker 0 stops at 20 (idle); worker 2, added at 25, serves from 45; request 1
    # (arrival 30) waits for it: prefilled 45 -> 55, transferred by 60, tokens 62, 64, 66
    assert el["workers"][0]["stopped_ms"] == 20.0 and el["workers"][2]["ready_ms"] == 45.0
    assert res.log.token_times[1] == ticks(62.0, 3) and res.log.arrival[1] == 30.0
    pools = {p["name"]: p for p in el["pools"]}
    assert pools["prefill"]["gpu_seconds"] == pytest.approx((20.0 + (66.0 - 25.0)) / 1000.0)
    assert pools["decode"]["gpu_seconds"] == pytest.approx(66.0 / 1000.0)
    assert el["gpu_seconds"] == pytest.approx(
        pools["prefill"]["gpu_seconds"] + pools["decode"]["gpu_seconds"])
    assert pools["decode"]["completed"] == pools["prefill"]["completed"] == 2


def test_the_static_planner_sizes_each_pool(tmp_path: Path) -> None:
    extra = ("lifecycle: {startup_s: 0.01}\n"
             "planner: {type: static, workers: {decode: 2}}\n")
    res = run(tmp_path, [(0, 32, 3), (20, 32, 3), (22, 32, 3)], extra)
    el = res.report["elastic"]
    assert el["scaling"] == [{"t_ms": 0.0, "pool": "decode", "action": "add", "worker": 2,
                              "reason": "static"}]
    assert el["workers"][2]["ready_ms"] == 10.0
    # requests 1 and 2 are reserved at 30 and 40 (one prefill worker): the decode load
    # router spreads them over the two decode workers
    assert sorted(res.log.worker[1:]) == [1, 2]
    assert [p["workers_final"] for p in el["pools"]] == [1, 2]


def test_a_slow_window_stretches_a_decode_workers_passes(tmp_path: Path) -> None:
    extra = "faults: {slow: [{worker: 1, from_s: 0.02, until_s: 0.03, factor: 3.0}]}\n"
    res = run(tmp_path, [(0, 32, 10)], extra)
    # passes starting in [20, 30) take 6 ms: 19 -> 21 -> 27 -> 33, then 2 ms again
    assert res.log.token_times[0] == [17.0, 19.0, 21.0, 27.0, 33.0, 35.0, 37.0, 39.0, 41.0, 43.0]
    assert res.report["elastic"]["faults"]["slow_windows"] == 1


class Recorder(Planner):
    """Keeps every snapshot; asks for two decode workers at its second tick."""

    def __init__(self, config: Any, pools: Any, interval_s: float) -> None:
        super().__init__(config, pools, interval_s)
        self.seen: list[Any] = []

    def tick(self, snapshot: Any) -> Any:
        from servesim.replay.planning import PlannerDecision

        self.seen.append(snapshot)
        return PlannerDecision(targets={"decode": 2}) if len(self.seen) == 2 else None


def test_the_planner_sees_each_pool(tmp_path: Path) -> None:
    rows = [(2 * i, 32, 8) for i in range(12)]
    loaded = load_config(config(tmp_path, rows, "planner: {type: static, interval_s: 0.02}\n"))
    workload = load_workload(loaded.sim.workload, loaded.plugins)
    r = build_elastic_split(loaded, workload, [], [], record_metrics=True)
    planner = r.planner = Recorder(None, {"prefill": 1, "decode": 1}, 0.02)
    assert r.run_driver is None  # runs of passes are declined: a lifecycle event may cut any
    r.run()
    first, second = planner.seen[0], planner.seen[1]
    assert [p.name for p in first.pools] == ["prefill", "decode"]
    assert (first.now_ms, second.now_ms, second.since_ms) == (0.0, 20.0, 0.0)
    pf, dc = second.pool("prefill"), second.pool("decode")
    assert (pf.ready, dc.ready) == (1, 1) and second.traffic.requests == 10
    assert pf.passes and all(f.num_prefill_requests >= 1 for f in pf.passes)
    assert dc.passes and all(f.num_prefill_requests == 0 for f in dc.passes)
    third = planner.seen[2]
    assert third.pool("decode").starting == 0 and third.pool("decode").ready == 2
    assert r.elastic_report()["scaling"][0]["t_ms"] == 20.0


# --------------------------------------------------------------------------- every backend


MIXED = """
lifecycle: {startup_s: 0.05, warmup: {duration_s: 0.05, factor: 1.5}, drain: redirect,
            retry: {max_attempts: 2, backoff_s: 0.01}}
planner: {type: schedule, interval_s: 0.05, steps: [{at_s: 0.1, workers: 2, pool: decode},
          {at_s: 0.15, workers: 2, pool: prefill}, {at_s: 0.3, workers: 1, pool: decode}]}
faults: {seed: 2, restart_s: 0.05, crashes: [{at_s: 0.12, worker: 0}, {at_s: 0.2, worker: 1}],
         slow: [{worker: 1, from_s: 0.05, until_s: 0.2, factor: 2.0}],
         kv_transfer: {failure_rate: 0.2, max_retries: 1, fallback: local_prefill}}
"""


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_backend_keeps_the_accounting(tmp_path: Path, backend: str) -> None:
    rows = [(4 * i, 16 + 16 * (i % 3), 3 + i % 5) for i in range(60)]
    a = run(tmp_path, rows, MIXED, backend=backend)
    b = run(tmp_path, rows, MIXED, backend=backend)
    assert dumps(a.report) == dumps(b.report)
    el = a.report["elastic"]
    sub, done, failed, rejected = accounting(a.report)
    assert sub == 60 == done + failed + rejected and failed == 0
    assert a.log.ntok == [3 + i % 5 for i in range(60)]
    f = el["faults"]
    assert f["crashes"] == 2 and f["kv_transfer_failures"] > 0 and el["requests"]["retried"] > 0
