"""STATIC_BATCH: a new batch starts only after every request of the previous one finished."""

from __future__ import annotations

from collections.abc import Callable

from servesim.contract import Request
from servesim.engine import Engine
from servesim.testing.driver import DriveResult, drive
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]


def workload() -> list[tuple[float, Request]]:
    """A (3 tokens), B (6 tokens), C at t=0; D arrives mid-batch at t=5."""
    out = [(0.0, Request(0, Tokens(range(8)), 3)), (0.0, Request(1, Tokens(range(50, 58)), 6))]
    out.append((0.0, Request(2, Tokens(range(100, 108)), 2)))
    out.append((5.0, Request(3, Tokens(range(150, 158)), 2)))
    return out


def admitted_at(result: DriveResult) -> dict[int, float]:
    return {a.request_id: p.started_at_ms for p in result.passes for a in p.by_rank[0].effects.admissions}


def test_next_batch_waits_for_the_whole_batch(make_engine: MakeEngine) -> None:
    engine = make_engine("static_batch", block_size=4, trt={"max_batch_size": 2})
    result = drive(engine, workload())
    # Batch 1 = A, B (max_batch_size 2): prefill [0, 10], A done at 14, B at 20.
    assert result.requests[0].completed_ms == 14.0
    assert result.requests[1].completed_ms == 20.0
    # C could run from t=14 under in-flight batching, but waits for B; D joins C's batch.
    assert admitted_at(result) == {0: 0.0, 1: 0.0, 2: 20.0, 3: 20.0}
    assert result.requests[2].token_times == [30.0, 32.0]
    assert result.requests[3].token_times == [30.0, 32.0]


def test_guaranteed_no_evict_refills_the_freed_slot(make_engine: MakeEngine) -> None:
    engine = make_engine("guaranteed_no_evict", block_size=4, trt={"max_batch_size": 2})
    result = drive(engine, workload())
    # C joins at t=14 beside B; D (arrived at 5) takes the slot C frees at 28.
    assert admitted_at(result) == {0: 0.0, 1: 0.0, 2: 14.0, 3: 28.0}


def test_batch_is_capped_by_blocks_reserved_to_completion(make_engine: MakeEngine) -> None:
    """6 blocks of 4 tokens; each request reserves ceil((8 + output) / 4) blocks: A 3, B 4,
    C 3, D 3. Without a batch-size limit the batches are {A}, {B}, {C, D}; nothing pauses."""
    engine = make_engine("static_batch", block_size=4, num_gpu_blocks=6, enable_prefix_caching=False)
    result = drive(engine, workload())
    assert admitted_at(result) == {0: 0.0, 1: 14.0, 2: 34.0, 3: 34.0}
    assert result.requests[1].token_times == [24.0 + 2.0 * k for k in range(6)]
    assert all(not p.by_rank[0].effects.pressure_events for p in result.passes)
    assert all(len(t.token_times) == n for t, n in zip(result.requests.values(), (3, 6, 2, 2), strict=True))
