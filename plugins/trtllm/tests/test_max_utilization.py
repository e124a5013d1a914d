"""MAX_UTILIZATION: pack by next-step blocks, pause from the back of the active list.

The scenario: 6 blocks of 4 tokens; three requests with 4-token prompts and 12 outputs
arrive together (each needs 4 blocks to finish, 12 in all). Fixed timing: prefill 10 ms,
decode 2 ms. Hand trace:

* t=0: all three fit (one block each) — GNE would admit only one (see below);
* t=10: each takes its second block (6/6 used); tokens at 10, 12, 14, 16, 18;
* t=18: every request needs its third block, none is free: A does not fit, so the last
  started request from the end of the list, C, is paused (2 blocks back); A and B fit;
* t=26: A needs its fourth block; C is not started, so B (the last started one) pauses;
* t=32: A finishes; B resumes (its 13-token context re-prefilled, minus the prefix still
  cached), C does not fit beside it and waits; t=46: B finishes, C resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from servesim.contract import PressureKind, PressureState, Request
from servesim.engine import Engine
from servesim.testing.driver import DriveResult, drive
from servesim.tokens import Tokens
from servesim_trtllm.config import ContextChunkingPolicy

MakeEngine = Callable[..., Engine]


def workload() -> list[tuple[float, Request]]:
    return [(0.0, Request(i, Tokens(range(100 * i, 100 * i + 4)), 12)) for i in range(3)]


def run(make_engine: MakeEngine, policy: str, **kw: Any) -> DriveResult:
    engine = make_engine(policy, block_size=4, num_gpu_blocks=6, record=True, **kw)
    return drive(engine, workload())


def test_pauses_last_started_request_and_resumes_through_prefix_cache(
    make_engine: MakeEngine,
) -> None:
    result = run(make_engine, "max_utilization")
    pauses = [(p.started_at_ms, ev) for p in result.passes for ev in p.by_rank[0].effects.pressure_events]
    assert [(t, ev.request_id) for t, ev in pauses] == [(18.0, 2), (26.0, 1)]
    t, first = pauses[0]
    assert first.kind is PressureKind.TRTLLM_PAUSE and first.at_ms == 18.0
    assert first.state_before == PressureState(3, 0, 6)
    assert first.state_after == PressureState(2, 1, 4)
    assert first.request_active_blocks_before == 2
    admitted = [
        (p.started_at_ms, a.request_id, a.reused_input_tokens)
        for p in result.passes
        for a in p.by_rank[0].effects.admissions
    ]
    # B's first two blocks are still cached at t=32 (A's new block evicted B's leaf).
    assert admitted == [(0.0, 0, 0), (0.0, 1, 0), (0.0, 2, 0), (32.0, 1, 8), (46.0, 2, 0)]
    schedules = {c.end_ms: c.by_rank[0].effects.schedule for c in result.completions}
    assert schedules[42.0].scheduled == {1: 5} and schedules[42.0].resumed == [1]
    fpm = next(c for c in result.completions if c.end_ms == 20.0).by_rank[0].effects.forward_pass_metrics
    assert (fpm.num_queued_decode, fpm.sum_queued_decode_kv_tokens) == (1, 9)  # paused C
    times = {
        rid: (t.token_times[0], t.completed_ms, len(t.token_times)) for rid, t in result.requests.items()
    }
    assert times == {0: (10.0, 32.0, 12), 1: (10.0, 46.0, 12), 2: (10.0, 68.0, 12)}
    final = result.completions[-1].by_rank[0].effects.metrics
    assert final.preemptions_total == 2 and final.active_blocks == 0


def test_without_prefix_caching_a_resumed_request_recomputes_everything(
    make_engine: MakeEngine,
) -> None:
    result = run(make_engine, "max_utilization", enable_prefix_caching=False)
    schedules = {c.end_ms: c.by_rank[0].effects.schedule for c in result.completions}
    assert schedules[42.0].scheduled == {1: 13}
    assert result.requests[1].completed_ms == 46.0


def test_packs_more_than_guaranteed_no_evict(make_engine: MakeEngine) -> None:
    def peak_running(result: DriveResult) -> int:
        return max(c.by_rank[0].effects.schedule.running for c in result.completions)

    gne = run(make_engine, "guaranteed_no_evict")
    mu = run(make_engine, "max_utilization")
    assert peak_running(gne) == 1 and peak_running(mu) == 3
    assert all(not p.by_rank[0].effects.pressure_events for p in gne.passes)
    # Packing pays off here even with the recomputation after pauses.
    assert mu.end_ms < gne.end_ms


@pytest.mark.parametrize(
    ("chunking", "first", "second"),
    [
        # FCFS: A takes 30 of 40; B's 10 rounds down to the 16-token unit → 0.
        ("first_come_first_served", {0: 30}, {0: 1, 1: 30}),
        # Equal progress: 16-token units in turn while they fit.
        ("equal_progress", {0: 16, 1: 16}, {0: 14, 1: 14}),
    ],
)
def test_micro_batch_chunks_contexts(
    make_engine: MakeEngine, chunking: str, first: dict[int, int], second: dict[int, int]
) -> None:
    engine = make_engine(
        "max_utilization",
        block_size=16,
        record=True,
        trt={"max_num_tokens": 40, "context_chunking_policy": ContextChunkingPolicy(chunking)},
    )
    reqs = [(0.0, Request(i, Tokens(range(100 * i, 100 * i + 30)), 2)) for i in range(2)]
    result = drive(engine, reqs)
    schedules = [c.by_rank[0].effects.schedule.scheduled for c in result.completions]
    assert schedules[0] == first
    assert schedules[1] == second


def test_generation_tokens_come_off_the_budget_first(make_engine: MakeEngine) -> None:
    engine = make_engine("max_utilization", block_size=16, record=True, trt={"max_num_tokens": 33})
    reqs = [(0.0, Request(0, Tokens(range(16)), 3)), (5.0, Request(1, Tokens(range(50, 90)), 2))]
    result = drive(engine, reqs)
    schedules = [c.by_rank[0].effects.schedule.scheduled for c in result.completions]
    # t=10: A decodes (1 token); B's 40-token context gets 32 (two 16-token units).
    assert schedules[1] == {1: 32, 0: 1}
    assert schedules[2] == {1: 8, 0: 1}


def test_a_hit_evicted_earlier_in_the_same_step_is_recomputed(make_engine: MakeEngine) -> None:
    """6 blocks of 4. X's two prompt blocks, then Y's three, become cached (LRU: X oldest);
    one block stays free. A (new, 3 blocks) and B (X's 8 tokens + 4, so 2 cached blocks)
    arrive together; the capacity check counts cached blocks as free, so both fit. A's
    allocation evicts X's blocks before B allocates: B must not count on them."""
    engine = make_engine("max_utilization", block_size=4, num_gpu_blocks=6, record=True)
    x = list(range(8))
    reqs = [
        (0.0, Request(0, Tokens(x), 1)),
        (20.0, Request(1, Tokens(range(100, 112)), 1)),
        (40.0, Request(2, Tokens(range(200, 212)), 2)),
        (40.0, Request(3, Tokens(x + [300, 301, 302, 303]), 2)),
    ]
    result = drive(engine, reqs)
    first = next(p for p in result.passes if p.started_at_ms == 40.0).by_rank[0].effects
    assert [(a.request_id, a.reused_input_tokens) for a in first.admissions] == [(2, 0), (3, 0)]
    schedule = next(c for c in result.completions if c.end_ms == 50.0).by_rank[0].effects.schedule
    assert schedule.scheduled == {2: 12, 3: 4}  # B's chunk was sized for an 8-token hit
    assert [len(result.requests[i].token_times) for i in range(4)] == [1, 1, 2, 2]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # beneficialToSkip: B would compute the same first block as A, so it waits one
        # step and then reuses A's whole 64-token prefix.
        ("max_utilization", [(0.0, 0, 0), (10.0, 1, 64)]),
        # The reference's GNE has no such delay, and its pass makes A's blocks visible as
        # they are scheduled (dynamo-mocker.md §2.3), so B hits them in the same step.
        ("guaranteed_no_evict", [(0.0, 0, 0), (0.0, 1, 64)]),
    ],
)
def test_contexts_sharing_a_new_prefix(
    make_engine: MakeEngine, policy: str, expected: list[tuple[float, int, int]]
) -> None:
    shared = list(range(64))
    reqs = [
        (0.0, Request(0, Tokens(shared + [500, 501]), 2)),
        (0.0, Request(1, Tokens(shared + [600, 601, 602]), 2)),
    ]
    result = drive(make_engine(policy, block_size=16), reqs)
    admitted = [
        (p.started_at_ms, a.request_id, a.reused_input_tokens)
        for p in result.passes
        for a in p.by_rank[0].effects.admissions
    ]
    assert admitted == expected
