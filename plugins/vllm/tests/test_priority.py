"""``engine.scheduling_policy: priority``: vLLM 0.32's priority queue and preemption victim
(servesim_vllm.priority; step-for-step against the real scheduler in
tests/conformance/test_vllm_oracle.py, scenarios ``prio_*``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.config.engine import EngineConfig, SchedulingPolicy
from servesim.config.loader import load_config
from servesim.contract import PressureKind
from servesim.replay.runner import simulate
from servesim.testing.driver import drive
from servesim_vllm.priority import PriorityWaiting
from servesim_vllm.rank import VllmRank
from servesim_vllm.request import VllmRequest
from vllm_helpers import make_engine, req

PRIORITY = SchedulingPolicy.PRIORITY


def _queued(prio: int, rid: int) -> VllmRequest:
    return VllmRequest(req(rid, 4, 1, priority=prio), None)


def test_the_queue_serves_lower_priority_values_first_and_ties_by_arrival() -> None:
    q = PriorityWaiting()
    a, b, c, d = _queued(2, 1), _queued(0, 2), _queued(2, 3), _queued(1, 4)
    for r in (a, b, c, d):
        q.append(r)
    assert [r.rid for r in q] == [2, 4, 1, 3]
    assert q[0] is b and q[2] is a and len(q) == 4
    assert q.popleft() is b
    # A requeued request (vLLM's prepend_request) takes its place by key, not the front.
    q.appendleft(b)
    assert [r.rid for r in q] == [2, 4, 1, 3]
    q.remove(d)
    assert [q.popleft().rid for _ in range(3)] == [2, 1, 3]
    assert not q
    # Arrivals are fixed once: the requeued request kept its first arrival.
    assert (a.arrival, b.arrival, c.arrival, d.arrival) == (1, 2, 3, 4)


def test_remove_of_a_request_not_waiting_is_an_error() -> None:
    q = PriorityWaiting()
    q.append(_queued(0, 1))
    with pytest.raises(ValueError, match="not waiting"):
        q.remove(_queued(0, 2))


def _first_tokens(policy: SchedulingPolicy) -> dict[int, float]:
    eng = make_engine(block_size=4, num_gpu_blocks=100, max_num_seqs=1, scheduling_policy=policy)
    arrivals = [(0.0, req(1, 8, 2, priority=3)), (0.0, req(2, 8, 2, priority=1)),
                (0.0, req(3, 8, 2, priority=2)), (0.0, req(4, 8, 2, priority=1))]
    r = drive(eng, arrivals)
    return {rid: t.token_times[0] for rid, t in r.requests.items()}


def test_one_sequence_at_a_time_is_served_in_priority_order() -> None:
    """Fixed timing: a prefill pass 10 ms, a decode pass 2 ms; each request takes one prefill
    (first token) and one decode."""
    assert _first_tokens(SchedulingPolicy.FCFS) == {1: 10.0, 2: 22.0, 3: 34.0, 4: 46.0}
    # priorities 3, 1, 2, 1: requests 2 and 4 (priority 1, by arrival), then 3, then 1.
    assert _first_tokens(PRIORITY) == {2: 10.0, 4: 22.0, 3: 34.0, 1: 46.0}


def _victims(policy: SchedulingPolicy) -> list[int]:
    """Three 7-token prompts in 4-token blocks fill a 6-block pool; the first decode step's
    tokens fit, the second's need a third block each, so one request is preempted."""
    eng = make_engine(block_size=4, num_gpu_blocks=6, max_num_seqs=8, scheduling_policy=policy)
    arrivals = [(0.0, req(1, 7, 4, priority=0)), (0.0, req(2, 7, 4, priority=2)),
                (0.0, req(3, 7, 4, priority=1))]
    r = drive(eng, arrivals)
    return [e.request_id for p in r.passes for e in p.by_rank[0].effects.pressure_events
            if e.kind is PressureKind.VLLM_PREEMPTION]


def test_preemption_takes_the_lowest_priority_running_request() -> None:
    # FCFS: the newest running request (3); priority: the largest priority value (2), which
    # sits before request 3 in the running list.
    assert _victims(SchedulingPolicy.FCFS)[0] == 3
    assert _victims(PRIORITY)[0] == 2


def test_runs_decline_under_priority() -> None:
    eng = make_engine(block_size=16, num_gpu_blocks=1000, scheduling_policy=PRIORITY)
    r = drive(eng, [(0.0, req(i, 40, 50, priority=i % 3)) for i in range(8)], runs=True)
    assert r.runs == []
    eng = make_engine(block_size=16, num_gpu_blocks=1000)
    r = drive(eng, [(0.0, req(i, 40, 50, priority=i % 3)) for i in range(8)], runs=True)
    assert r.runs  # the same workload under FCFS decodes in runs


def test_priority_is_not_modelled_with_the_host_tier() -> None:
    cfg = EngineConfig(scheduling_policy=PRIORITY, native_host_offload={"num_host_blocks": 10},  # type: ignore[arg-type]
                       kv_bytes_per_token=1.0)
    problems = VllmRank.validate_config(cfg, None)
    assert ("engine.scheduling_policy",
            "priority is not modelled with engine.native_host_offload; use fcfs") in problems
    assert VllmRank.validate_config(EngineConfig(scheduling_policy=PRIORITY), None) == []


def test_the_resolved_config_shows_the_policy_only_when_set() -> None:
    assert "scheduling_policy" not in load_config(None).resolved()["engine"]
    loaded = load_config(None, ["engine.scheduling_policy=priority"])
    assert loaded.resolved()["engine"]["scheduling_policy"] == "priority"
    assert loaded.sim.engine.scheduling_policy is PRIORITY


def _service_order(tmp_path: Path, policy: str, split: bool = False) -> list[int]:
    """Six one-block prompts 1 ms apart served one at a time (aggregated: by a rank with
    ``max_num_seqs: 1``, in admission order; split: by a decode worker with ``max_num_seqs:
    1``, in completion order); the last arrival is the most urgent."""
    trace = tmp_path / "t.jsonl"
    prios = [3, 3, 1, 3, 2, 0]
    trace.write_text("".join(
        json.dumps({"timestamp": i, "input_length": 16, "output_length": 20, "hash_ids": [i],
                    "priority": p}) + "\n" for i, p in enumerate(prios)))
    sets = [f"workload.trace.path={trace}", "workload.trace.trace_block_size=16",
            "engine.block_size=16", f"engine.scheduling_policy={policy}"]
    if split:
        sets += ["cluster.prefill_workers=1", "cluster.decode_workers=1",
                 "cluster.decode_engine={max_num_seqs: 1}", "engine.kv_bytes_per_token=1000",
                 "engine.kv_transfer_bandwidth=10"]
    else:
        sets.append("engine.max_num_seqs=1")
    log = simulate(load_config(None, sets)).log
    times = log.done if split else log.admitted
    return sorted(range(len(prios)), key=lambda i: times[i])


@pytest.mark.parametrize("split", [False, True])
def test_replay_serves_by_trace_priority(tmp_path: Path, split: bool) -> None:
    assert _service_order(tmp_path, "fcfs", split) == [0, 1, 2, 3, 4, 5]
    # Request 0 runs alone from 0 ms; the others queue behind it and leave by priority (on a
    # split, as activated destinations in the decode worker's queue).
    assert _service_order(tmp_path, "priority", split) == [0, 5, 2, 4, 1, 3]
