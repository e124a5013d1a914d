"""Invariants of an elastic, failing prefill/decode split under random fault schedules
(servesim.replay.elastic_split): every request ends once, with all its tokens when it
completes; no router, wait list or transfer keeps a request; every live worker's KV blocks
are free at the end and each worker incarnation's KV events replay cleanly; the same
schedule gives the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.contract import CancelSource, HandoffId
from servesim.replay.disagg import DecodeLoadRouter
from servesim.replay.elastic_setup import build_elastic_split
from servesim.replay.runner import load_workload
from servesim.sinks.builtin import MemoryKvEventSink
from servesim.testing.trace import kv_event_problems

BASE = """
engine:
  backend: {backend}
  block_size: 16
  num_gpu_blocks: 400
  max_num_seqs: 8
  timing_model: {{type: fixed, prefill_ms: 8.0, decode_ms: 2.0}}
workload:
  synthetic: {{num_requests: 50, rate: 60.0, input_length: "uniform:32:256",
              output_length: "uniform:4:32", block_size: 16}}
cluster: {{prefill_workers: 2, decode_workers: 2, router: kv, handoff_latency_ms: 3.0,
          decode_engine: {{num_gpu_blocks: {decode_blocks}}}}}
"""

times = st.floats(0.0, 1.0).map(lambda x: round(x, 3))
schedules = st.fixed_dictionaries({
    "backend": st.sampled_from(["vllm", "sglang", "trtllm"]),
    "crashes": st.lists(st.tuples(times, st.integers(0, 5)), max_size=4),
    "mtbf": st.sampled_from(["null", "0.5", "2"]),
    "restart": st.sampled_from([0.0, 0.05, 0.3]),
    "slow": st.lists(st.tuples(st.integers(0, 4), times, st.sampled_from([1.5, 3.0])), max_size=2),
    "drain": st.sampled_from(["wait", "redirect", "immediate"]),
    "attempts": st.integers(0, 2),
    "steps": st.lists(st.tuples(times, st.integers(0, 3), st.sampled_from(["prefill", "decode"])),
                      max_size=4),
    "rate": st.sampled_from([0.0, 0.2, 0.6]),
    "retries": st.integers(0, 2),
    "fallback": st.sampled_from(["local_prefill", "fail"]),
    "view": st.sampled_from(["", "{drop: 0.3}", "{delay_ms: 10}"]),
    "seed": st.integers(0, 5),
    # few decode blocks: reservations wait (redirected when their worker drains)
    "decode_blocks": st.sampled_from([400, 40]),
})


def _config(s: dict[str, Any]) -> str:
    crashes = ", ".join(f"{{at_s: {t}, worker: {w}}}" for t, w in s["crashes"])
    slow = ", ".join(f"{{worker: {w}, from_s: {a}, until_s: {a + 0.3}, factor: {f}}}"
                     for w, a, f in s["slow"])
    steps = ", ".join(f"{{at_s: {t}, workers: {n}, pool: {p}}}" for t, n, p in s["steps"])
    return BASE.format(backend=s["backend"], decode_blocks=s["decode_blocks"]) + (
        f"lifecycle: {{startup_s: 0.05, warmup: {{duration_s: 0.1, factor: 1.5}}, drain: {s['drain']},\n"
        f"            retry: {{max_attempts: {s['attempts']}, backoff_s: 0.02}}, min_workers: 1}}\n"
        f"planner: {{type: schedule, interval_s: 0.2, steps: [{steps}]}}\n"
        f"faults: {{seed: {s['seed']}, mtbf_s: {s['mtbf']}, restart_s: {s['restart']},\n"
        f"         crashes: [{crashes}], slow: [{slow}], kv_view: [{s['view']}],\n"
        f"         kv_transfer: {{failure_rate: {s['rate']}, max_retries: {s['retries']},"
        f" fallback: {s['fallback']}}}}}\n"
    )


def _replay(tmp_path: Path, s: dict[str, Any]) -> tuple[Any, MemoryKvEventSink, Any]:
    path = tmp_path / "sim.yaml"
    path.write_text(_config(s))
    loaded = load_config(str(path))
    workload = load_workload(loaded.sim.workload, loaded.plugins)
    sink = MemoryKvEventSink()
    r = build_elastic_split(loaded, workload, [sink], [], record_metrics=True)
    r.run()
    return r, sink, workload


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=schedules)
def test_invariants_under_random_faults_in_a_split(tmp_path: Path, s: dict[str, Any]) -> None:
    r, sink, workload = _replay(tmp_path, s)
    log = r.log
    n = log.n
    req = r.elastic_report()["requests"]
    # accounting: every request ends once, completed, failed or rejected
    assert req["submitted"] == n == req["completed"] + req["failed"] + req["rejected"]
    assert all(d >= 0.0 for d in log.done)
    planned = [t.output_length for t in workload.turns()]
    for rid in range(n):
        if not log.rejected[rid]:
            assert log.ntok[rid] == planned[rid]  # no token lost or duplicated
            assert r.times["destination_activated_ms"][rid] >= 0.0
        else:
            assert log.ntok[rid] <= planned[rid]
    # nothing keeps a request: routers, waits, transfers, local prefills
    assert r.prefill_ready.routed_to == {} and r.decode_ready.routed_to == {}
    assert r.wait_prefill == r.wait_decode == [] and r.held == []
    assert r.transfer_end == {} and r.local_busy == {} and r.local_queue == {}
    assert not r.local_rids and not r.sources_lost and not any(r._deferred.values())
    for state in (r.prefill_state, r.state):
        assert not any(state.active_requests) and not state.holders
    inner = r.decode_ready.inner
    assert isinstance(inner, DecodeLoadRouter) and not any(inner.members)
    # every live worker is drained and holds no KV block for a request (SGLang counts the
    # pages its radix tree keeps as active: only its request counts are checked)
    for w, engine in enumerate(r.engines):
        if w in r.dead:
            continue
        assert engine.is_drained(), w
        for dp in range(engine.dp_size):
            metrics = engine.apply(dp, CancelSource(HandoffId(10**9)), r.now).metrics
            assert metrics is not None and metrics.running_requests == metrics.waiting_requests == 0
            if s["backend"] != "sglang":
                assert metrics.active_blocks == 0, (w, metrics)
    # each worker incarnation's KV events replay cleanly; none after a worker stopped
    by_worker: dict[int, list[Any]] = {}
    for w, at, ev in sink.events:
        by_worker.setdefault(w, []).append((ev.dp_rank, at, ev))
    for w, evs in by_worker.items():
        seg: list[Any] = []
        for item in evs:
            seg.append(item)
            if type(item[2].data).__name__ == "ClearedBlocks":
                assert kv_event_problems(seg) == [], w
                seg = []
        assert kv_event_problems(seg) == [], w
        stop = r.records[w].stopped_ms
        if stop >= 0:
            assert evs[-1][1] <= stop
    faults = r.faults.report()
    assert faults["kv_transfer_failures"] == (
        faults["kv_transfer_retries"] + faults["local_prefills"] + faults["kv_transfer_lost"])


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=schedules)
def test_same_faults_same_bytes_in_a_split(tmp_path: Path, s: dict[str, Any]) -> None:
    a, sa, _ = _replay(tmp_path, s)
    b, sb, _ = _replay(tmp_path, s)
    assert json.dumps(a.elastic_report(), sort_keys=True) == json.dumps(b.elastic_report(), sort_keys=True)
    assert a.log.done == b.log.done and a.log.worker == b.log.worker
    assert a.times == b.times
    assert repr(sa.events) == repr(sb.events)
