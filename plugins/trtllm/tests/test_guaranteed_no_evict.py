"""GUARANTEED_NO_EVICT semantics (dynamo-mocker.md §6) and the contract plumbing of the rank.

Fixed timing (prefill 10 ms, decode 2 ms per call) makes every expected time hand-computable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from servesim.contract import (
    APPLIED,
    NOOP,
    CancelRequest,
    CancelSource,
    HandoffId,
    RemovedBlocks,
    Request,
    StoredBlocks,
    Submit,
    SubmitHandoffPrefill,
)
from servesim.engine import Engine
from servesim.errors import CommandRejected
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.testing.driver import drive
from servesim.timing.base import TimingModel
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]


def tokens(n: int, base: int = 0) -> Tokens:
    return Tokens(range(base, base + n))


def admissions(result: Any) -> dict[int, float]:
    """request id → start time of the pass that (first) admitted it."""
    out: dict[int, float] = {}
    for started in result.passes:
        for rp in started.by_rank:
            for adm in rp.effects.admissions:
                out.setdefault(adm.request_id, started.started_at_ms)
    return out


def test_enqueue_normalisation(make_engine: MakeEngine) -> None:
    # capacity = 4 blocks × 16 = 64 tokens
    engine = make_engine(num_gpu_blocks=4, block_size=16, enable_prefix_caching=False)
    reqs = [
        (0.0, Request(0, tokens(64), 5)),  # prompt ≥ capacity: rejected
        (1.0, Request(1, tokens(40, 100), 100)),  # output clamped to 64 - 40 = 24
    ]
    result = drive(engine, reqs)
    assert result.requests[0].rejected and result.requests[0].token_times == []
    assert result.requests[0].completed_ms is not None
    assert len(result.requests[1].token_times) == 24


def test_max_model_len_clamps_output(make_engine: MakeEngine) -> None:
    engine = make_engine(max_model_len=50, block_size=16)
    result = drive(engine, [(0.0, Request(0, tokens(40), 100)), (0.5, Request(1, tokens(50), 3))])
    assert len(result.requests[0].token_times) == 10
    assert result.requests[1].rejected


def test_admission_reserves_blocks_to_completion(make_engine: MakeEngine) -> None:
    """10 blocks of 4 tokens; each request (8 + 12 tokens) needs 5 blocks to finish. After A
    and B, available = (10 - 4) - (3 + 3) = 0 < 5, so C waits for a completion even though
    its prompt (2 blocks) would fit; nothing is ever preempted."""
    engine = make_engine(num_gpu_blocks=10, block_size=4, enable_prefix_caching=False)
    reqs = [(0.0, Request(i, tokens(8, 100 * i), 12)) for i in range(3)]
    result = drive(engine, reqs)
    adm = admissions(result)
    assert adm == {0: 0.0, 1: 0.0, 2: 32.0}
    # A, B: prefill [0, 10] → first token 10; eleven 2 ms decodes → done at 32.
    assert result.requests[0].token_times == [10.0 + 2.0 * k for k in range(12)]
    assert result.requests[2].first_token_ms == 42.0
    assert all(not rp.effects.pressure_events for p in result.passes for rp in p.by_rank)
    for done in result.completions:
        metrics = done.by_rank[0].effects.metrics
        assert metrics.active_blocks <= 10
        assert metrics.preemptions_total == 0


def test_first_token_timing(make_engine: MakeEngine) -> None:
    """Default: the context forward samples the first token (the installed reference);
    ``first_token_decode_call`` adds the decode call of aisimulate-engine.md §6.4."""
    req = Request(0, tokens(8), 3)
    plain = drive(make_engine(block_size=4), [(0.0, req)])
    assert plain.requests[0].token_times == [10.0, 12.0, 14.0]
    extra = drive(make_engine(block_size=4, trt={"first_token_decode_call": True}), [(0.0, req)])
    assert extra.requests[0].token_times == [12.0, 14.0, 16.0]


def test_mixed_pass_prices_prefill_then_ongoing_decodes(make_engine: MakeEngine) -> None:
    reqs = [(0.0, Request(0, tokens(8), 3)), (1.0, Request(1, tokens(8, 50), 2))]
    result = drive(make_engine(block_size=4), reqs)
    assert result.requests[0].token_times == [10.0, 22.0, 24.0]
    assert result.requests[1].token_times == [22.0, 24.0]


class RecordingTiming(TimingModel):
    def __init__(self) -> None:
        self.prefill: list[tuple[int, int, int]] = []
        self.decode: list[tuple[int, int, int, int]] = []

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        self.prefill.append((batch_size, mean_isl, mean_prefix))
        return 10.0

    def predict_decode_ms(self, batch_size: int, active: int, mean_ctx: int, total: int) -> float:
        self.decode.append((batch_size, active, mean_ctx, total))
        return 2.0


def test_prefix_reuse_is_admitted_and_priced(make_engine: MakeEngine) -> None:
    timing = RecordingTiming()
    engine = make_engine(block_size=16, num_gpu_blocks=64, timing=timing)
    shared = list(range(32))
    a = Request(0, Tokens(shared + [900 + k for k in range(8)]), 2)
    b = Request(1, Tokens(shared + [700 + k for k in range(4)]), 2)
    result = drive(engine, [(0.0, a), (20.0, b)])
    assert result.requests[1].cached_tokens == 32
    reused = [adm for p in result.passes for adm in p.by_rank[0].effects.admissions]
    assert [(x.request_id, x.reused_input_tokens) for x in reused] == [(0, 0), (1, 32)]
    assert timing.prefill == [(1, 40, 0), (1, 36, 32)]
    # one decode call for A's second token: 41 tokens of context, 64 × 16 total
    assert timing.decode[0] == (1, 41, 41, 1024)


def test_kv_events_published_at_pass_end(make_engine: MakeEngine) -> None:
    engine = make_engine(block_size=4, num_gpu_blocks=4, kv_events=True)
    prompt = tokens(8)
    engine.apply(0, Submit(Request(0, prompt, 1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None and started.by_rank[0].effects.kv_events == ()
    done = engine.complete_pass(started.pass_id, started.end_ms)
    events = done.by_rank[0].effects.kv_events
    seq, local = prompt.block_hashes(4)
    assert [e.event_id for e in events] == [0]
    stored = events[0].data
    assert isinstance(stored, StoredBlocks) and stored.parent_hash is None
    assert [(b.block_hash, b.tokens_hash) for b in stored.blocks] == list(zip(seq, local, strict=True))
    # A different 12-token prompt needs 3 blocks: 2 free ones and one eviction, of the leaf
    # block (released tail first, so it is the oldest inactive block).
    engine.apply(0, Submit(Request(1, tokens(12, 500), 1)), started.end_ms)
    second = engine.execute_pass(started.end_ms)
    assert second is not None
    later = engine.complete_pass(second.pass_id, second.end_ms).by_rank[0].effects.kv_events
    removed = [e.data for e in later if isinstance(e.data, RemovedBlocks)]
    assert removed == [RemovedBlocks((seq[1],))]
    assert later.index(next(e for e in later if isinstance(e.data, RemovedBlocks))) == 0
    assert [e.event_id for e in later] == list(range(1, 1 + len(later)))


def test_cancel_mid_pass_suppresses_outputs(make_engine: MakeEngine) -> None:
    engine = make_engine(block_size=4)
    engine.apply(0, Submit(Request(0, tokens(8), 4)), 0.0)
    engine.apply(0, Submit(Request(1, tokens(8, 40), 4)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    effects = engine.apply(0, CancelRequest(0), 5.0)
    assert effects.result == APPLIED
    assert effects.retired_requests == (0,) and effects.suppressed_pending_output
    done = engine.complete_pass(started.pass_id, started.end_ms).by_rank[0].effects
    assert done.outputs.token_request_ids == [1]
    assert done.metrics.running_requests == 1
    again = engine.apply(0, CancelRequest(0), 11.0)
    assert again.result == NOOP and again.retired_requests == ()


def test_duplicate_submit_and_duplicate_handoff_are_refused(make_engine: MakeEngine) -> None:
    engine = make_engine()
    engine.apply(0, Submit(Request(0, tokens(8), 4)), 0.0)
    before = engine.apply(0, CancelSource(HandoffId(1)), 0.0)
    assert before.result == NOOP and before.metrics.waiting_requests == 1
    with pytest.raises(CommandRejected, match="already active"):
        engine.apply(0, Submit(Request(0, tokens(5), 1)), 0.0)
    after = engine.apply(0, CancelSource(HandoffId(1)), 0.0)
    assert after.metrics == before.metrics
    engine.apply(0, SubmitHandoffPrefill(HandoffId(2), Request(3, tokens(5), 1)), 0.0)
    with pytest.raises(CommandRejected, match="already registered"):
        engine.apply(0, SubmitHandoffPrefill(HandoffId(2), Request(4, tokens(5), 1)), 0.0)


def test_max_batch_size_and_max_num_tokens_bound_each_step(make_engine: MakeEngine) -> None:
    engine = make_engine(block_size=4, trt={"max_batch_size": 2, "max_num_tokens": 20}, record=True)
    result = drive(engine, [(0.0, Request(i, tokens(16, 50 * i), 3)) for i in range(5)])
    records = [c.by_rank[0].effects.schedule for c in result.completions]
    assert records[0].scheduled == {0: 16, 1: 4}  # running first, admission takes the rest
    assert records[1].scheduled == {0: 1, 1: 12}
    for rec in records:
        assert len(rec.scheduled) <= 2 and sum(rec.scheduled.values()) <= 20
        assert rec.running <= 2
    assert all(len(t.token_times) == 3 for t in result.requests.values())


def test_without_chunked_context_a_prompt_waits_for_a_whole_budget(make_engine: MakeEngine) -> None:
    engine = make_engine(block_size=4, enable_chunked_prefill=False, trt={"max_num_tokens": 20}, record=True)
    reqs = [(0.0, Request(i, tokens(16, 50 * i), 2)) for i in range(2)]
    reqs.append((0.0, Request(9, tokens(21, 900), 2)))  # longer than any step: rejected
    result = drive(engine, reqs)
    records = [c.by_rank[0].effects.schedule for c in result.completions]
    assert records[0].scheduled == {0: 16}
    assert records[1].scheduled == {0: 1, 1: 16}
    assert result.requests[9].rejected


def test_kv_token_ids_and_planned_outputs(make_engine: MakeEngine) -> None:
    """With ``emit_kv_token_ids`` Stored blocks carry their tokens; a block of planned
    outputs hashes those tokens, so equal histories share it (dynamo-mocker.md §2.6)."""
    engine = make_engine(block_size=4, kv_events=True, emit_kv_token_ids=True)
    planned = (7, 8, 9, 10, 11)
    result = drive(engine, [(0.0, Request(0, tokens(4), 5, planned))])
    assert len(result.requests[0].token_times) == 5
    blocks = [
        b
        for done in result.completions
        for e in done.by_rank[0].effects.kv_events
        if isinstance(e.data, StoredBlocks)
        for b in e.data.blocks
    ]
    # Prompt block, then the block of generated tokens 7..10 (11 is the dangling token).
    assert [b.token_ids for b in blocks] == [(0, 1, 2, 3), (7, 8, 9, 10)]
    assert blocks[1].tokens_hash == local_block_hash([7, 8, 9, 10])
    assert blocks[1].block_hash == chain_hash(blocks[0].block_hash, blocks[1].tokens_hash)


@pytest.mark.parametrize(
    ("policy", "times"),
    [
        # Reference: no recompute; the decode call samples the first token (2 ms).
        ("guaranteed_no_evict", [22.0, 24.0]),
        # TensorRT-LLM recomputes the last block of a fully reused prompt (prefill 10 ms).
        ("max_utilization", [30.0, 32.0]),
    ],
)
def test_fully_cached_prompt(make_engine: MakeEngine, policy: str, times: list[float]) -> None:
    reqs = [(0.0, Request(0, tokens(8), 1)), (20.0, Request(1, tokens(8), 2))]
    result = drive(make_engine(policy, block_size=4), reqs)
    assert result.requests[1].token_times == times
    assert result.requests[1].cached_tokens == (8 if policy == "guaranteed_no_evict" else 4)


def test_forward_pass_metrics(make_engine: MakeEngine) -> None:
    """dynamo-mocker.md §4.5: scheduled prefill/decode shape, queued requests, duration."""
    engine = make_engine(block_size=4, trt={"max_batch_size": 2})
    reqs = [
        (0.0, Request(0, tokens(8), 3)),
        (1.0, Request(1, tokens(12, 100), 2)),
        (1.0, Request(2, tokens(6, 200), 2)),
    ]
    result = drive(engine, reqs)
    first, second = (c.by_rank[0].effects.forward_pass_metrics for c in result.completions[:2])
    assert (first.num_prefill_requests, first.sum_prefill_tokens, first.num_decode_requests) == (1, 8, 0)
    assert first.num_queued_prefill == 0 and first.duration_ms == 10.0
    # t=10: A decodes (9 tokens of context), B prefills 12, C (6 tokens) waits for a slot.
    assert (second.num_prefill_requests, second.sum_prefill_tokens, second.sum_prefill_kv_tokens) == (
        1,
        12,
        0,
    )
    assert (second.num_decode_requests, second.sum_decode_kv_tokens) == (1, 9)
    assert (second.num_queued_prefill, second.sum_queued_prefill_tokens) == (1, 6)
    assert second.duration_ms == 12.0 and second.counter_id == first.counter_id + 1
