"""SGLang 0.5.23's priority scheduling in the sglang rank (servesim_sglang.priority), on small
hand-checked cases; tests/conformance/test_sglang_priority_oracle.py checks it against SGLang."""

from __future__ import annotations

from typing import Any

import pytest
from servesim.config.engine import EngineConfig, SchedulingPolicy
from servesim.contract import Request, Submit
from servesim.factory import EngineFactory
from servesim.timing.builtin import FixedTiming
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig, scheduler_params
from servesim_sglang.conformance import SglangOracleOptions, build_engine, run_servesim
from servesim_sglang.priority import PriorityOrder
from servesim_sglang.priority_options import PriorityParams
from servesim_sglang.rank import SglangRank

FIELDS = ("step", "mode", "prefill", "decode", "retracted", "running_batch", "waiting", "free_tokens")


def _run(rows: list[dict[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    opts = SglangOracleOptions(priority=True, **kw)
    steps = run_servesim(build_engine(SglangRank, opts, {"profile": "sglang-0.5.23"}), rows, opts)
    return [{k: s[k] for k in FIELDS} for s in steps]


def _two(priority: int) -> list[dict[str, Any]]:
    return [dict(input_length=100, output_length=10, hash_ids=[1, 2], priority=0),
            dict(input_length=50, output_length=5, hash_ids=[3], priority=priority)]


def test_a_more_urgent_arrival_preempts_past_the_threshold() -> None:
    """One request slot; request 1 (priority 11) arrives while 0 (priority 0) runs: 11 − 0 > 10
    preempts 0 (released like a retraction, back in the queue), 1 is prefilled in its place
    and the step's running batch is empty (the new batch joins it at the next step)."""
    steps = _run(_two(11), max_running_requests=1, admit="stepwise", per_step=1)
    assert steps[0] == {"step": 0, "mode": "prefill", "prefill": {"0": 100}, "decode": [], "retracted": [],
                        "running_batch": 0, "waiting": 0, "free_tokens": 8092}
    assert steps[1] == {"step": 1, "mode": "prefill", "prefill": {"1": 50}, "decode": [], "retracted": ["0"],
                        "running_batch": 0, "waiting": 1, "free_tokens": 8042}
    assert [s["decode"] for s in steps[2:6]] == [["1"]] * 4
    # 0 resumes after 1 finished, its prompt still cached: only its first output is recomputed
    resumed = next(s for s in steps[6:] if s["prefill"])
    assert resumed["prefill"] == {"0": 1}


def test_a_difference_equal_to_the_threshold_does_not_preempt() -> None:
    steps = _run(_two(10), max_running_requests=1, admit="stepwise", per_step=1)
    assert [s["retracted"] for s in steps] == [[]] * len(steps)
    assert [s["decode"] for s in steps[1:10]] == [["0"]] * 9
    assert steps[1]["waiting"] == 1
    assert _run(_two(10), max_running_requests=1, admit="stepwise", per_step=1,
                preemption_threshold=9)[1]["retracted"] == ["0"]


@pytest.mark.parametrize(("low_first", "order"),
                         [(False, ["3", "1", "2", "0"]), (True, ["0", "1", "2", "3"])])
def test_the_queue_is_sorted_by_priority_then_entry(low_first: bool, order: list[str]) -> None:
    """Priorities 0, 5, 5, 9, all queued at once, one slot: higher values first by default
    (SGLang's direction), lower first with schedule_low_priority_values_first; the two 5s in
    arrival order."""
    rows = [dict(input_length=40, output_length=2, hash_ids=[10 + i], priority=p)
            for i, p in enumerate([0, 5, 5, 9])]
    steps = _run(rows, max_running_requests=1, low_priority_values_first=low_first)
    assert [k for s in steps for k in s["prefill"]] == order


def test_params_follow_sglang_names_and_defaults() -> None:
    prio = EngineConfig(backend="sglang", scheduling_policy=SchedulingPolicy.PRIORITY)
    sg = SglangConfig(profile="sglang-0.5.23")
    assert scheduler_params(prio, sg, 1).priority == PriorityParams(sign=-1, threshold=10, preemption=True)
    low = SglangConfig(profile="sglang-0.5.23", schedule_low_priority_values_first=True,
                       priority_scheduling_preemption_threshold=3, disable_priority_preemption=True)
    assert scheduler_params(prio, low, 1).priority == PriorityParams(sign=1, threshold=3, preemption=False)
    assert scheduler_params(EngineConfig(backend="sglang"), sg, 1).priority is None


def test_without_priority_the_rank_keeps_its_policy_and_runs() -> None:
    engine = build_engine(SglangRank, SglangOracleOptions(), {"profile": "sglang-0.5.23"})
    rank = engine.ranks[0]
    assert isinstance(rank, SglangRank)
    assert not isinstance(rank.sched.policy, PriorityOrder)
    prio = build_engine(SglangRank, SglangOracleOptions(priority=True), {"profile": "sglang-0.5.23"}).ranks[0]
    assert isinstance(prio, SglangRank) and isinstance(prio.sched.policy, PriorityOrder)
    assert prio.execute_run(0.0, 1e9, 100) is None


def _steady_rank(policy: SchedulingPolicy) -> tuple[SglangRank, float]:
    """Two requests past their prefill, nothing waiting, the reference profile (whose runs
    of decode passes the rank commits): the state in which a run can start."""
    factory = EngineFactory(
        EngineConfig(backend="sglang", num_gpu_blocks=4096, scheduling_policy=policy),
        SglangRank, FixedTiming(),
        backend_config=SglangConfig(disable_priority_preemption=True),
        emit_forward_pass_metrics=False,
    )
    engine = factory.build(0)
    for rid in range(2):
        engine.apply(0, Submit(Request(request_id=rid, prompt=Tokens(list(range(rid, rid + 64))),
                                       max_output_tokens=50, priority=rid)), 0.0)
    now = 0.0
    for _ in range(3):
        started = engine.execute_pass(now)
        assert started is not None
        now = started.end_ms
        engine.complete_pass(started.pass_id, now)
    rank = engine.ranks[0]
    assert isinstance(rank, SglangRank)
    assert len(rank.sched.running) == 2 and not rank.sched.waiting
    return rank, now


def test_priority_steps_where_fcfs_commits_a_run_of_decode_passes() -> None:
    fcfs, now = _steady_rank(SchedulingPolicy.FCFS)
    assert fcfs.execute_run(now, now + 1e6, 20) is not None
    prio, now = _steady_rank(SchedulingPolicy.PRIORITY)
    assert prio.execute_run(now, now + 1e6, 20) is None
