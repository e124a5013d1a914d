"""VllmRank behind the neutral contract: commands, cancellation and suppression, metrics,
forward-pass metrics, attention DP and plugin registration (aisimulate-engine.md §3, §4)."""

from __future__ import annotations

import pytest
from servesim.contract import (
    NOOP,
    CancelRequest,
    CancelSource,
    HandoffId,
    ResultKind,
    Submit,
    SubmitHandoffPrefill,
)
from servesim.errors import CommandRejected
from servesim.testing.driver import drive
from vllm_helpers import RecordingTiming, make_engine, req


def test_duplicate_submit_is_rejected_without_change() -> None:
    eng = make_engine(RecordingTiming(), block_size=4)
    first = eng.apply(0, Submit(req(1, 4, 1)), 0.0)
    assert first.result.kind is ResultKind.SUBMITTED and first.result.request_id == 1
    assert first.metrics.waiting_requests == 1
    with pytest.raises(CommandRejected, match="already active"):
        eng.apply(0, Submit(req(1, 8, 5)), 0.0)
    assert eng.ranks[0].metrics() == first.metrics
    s = eng.execute_pass(0.0)
    done = eng.complete_pass(s.pass_id, s.end_ms)
    assert done.by_rank[0].effects.outputs.token_request_ids == [1]


def test_malformed_requests_are_rejected_without_change() -> None:
    eng = make_engine(RecordingTiming(), block_size=4)
    with pytest.raises(CommandRejected, match="empty"):
        eng.apply(0, Submit(req(1, [], 3)), 0.0)
    with pytest.raises(CommandRejected, match="max_output_tokens"):
        eng.apply(0, Submit(req(2, 4, -1)), 0.0)
    assert eng.is_drained() and not eng.is_ready()


def test_cancel_waiting_request_retires_it() -> None:
    eng = make_engine(RecordingTiming(), block_size=4)
    eng.apply(0, Submit(req(1, 4, 1)), 0.0)
    eff = eng.apply(0, CancelRequest(1), 0.0)
    assert eff.result.kind is ResultKind.APPLIED and eff.retired_requests == (1,)
    assert not eff.suppressed_pending_output and eng.is_drained()
    assert eng.apply(0, CancelRequest(1), 0.0).result == NOOP


def test_cancel_mid_pass_suppresses_pending_outputs_and_frees_blocks() -> None:
    eng = make_engine(RecordingTiming(), block_size=4)
    eng.apply(0, Submit(req(1, 4, 5)), 0.0)
    s = eng.execute_pass(0.0)
    eff = eng.apply(0, CancelRequest(1), 5.0)
    assert eff.result.kind is ResultKind.APPLIED and eff.suppressed_pending_output
    assert eff.retired_requests == (1,) and eff.metrics.active_blocks == 0
    done = eng.complete_pass(s.pass_id, s.end_ms)
    assert done.by_rank[0].effects.outputs.is_empty() and eng.is_drained()


def test_noop_cancel_keeps_a_completed_requests_output_unless_discarded() -> None:
    for discard in (False, True):
        eng = make_engine(RecordingTiming(), block_size=4)
        eng.apply(0, Submit(req(1, 4, 1)), 0.0)
        s = eng.execute_pass(0.0)  # request 1 completes inside this pass
        eff = eng.apply(0, CancelRequest(1, discard_pending_output=discard), 5.0)
        assert eff.result == NOOP
        assert eff.suppressed_pending_output is discard
        assert eff.retired_requests == ((1,) if discard else ())
        out = eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects.outputs
        assert out.completed == ([] if discard else [1])


def test_handoff_cancels_of_unknown_handoffs_are_noops_and_duplicates_are_refused() -> None:
    eng = make_engine(RecordingTiming())
    assert eng.apply(0, CancelSource(HandoffId(1)), 0.0).result == NOOP
    eff = eng.apply(0, SubmitHandoffPrefill(HandoffId(1), req(1, 4, 1)), 0.0)
    assert eff.result.kind is ResultKind.SUBMITTED
    with pytest.raises(CommandRejected, match="already registered"):
        eng.apply(0, SubmitHandoffPrefill(HandoffId(1), req(2, 4, 1)), 0.0)
    assert not eng.is_drained()


def test_outputs_of_one_pass_share_its_end_and_carry_cached_tokens_once() -> None:
    prompt = list(range(8))
    eng = make_engine(RecordingTiming(), block_size=4)
    r = drive(eng, [(0.0, req(1, prompt, 2)), (0.0, req(2, prompt, 2))])
    first = r.completions[0].by_rank[0].effects.outputs
    assert first.token_request_ids == [1, 2] and first.cached_tokens == {1: 0, 2: 4}
    second = r.completions[1].by_rank[0].effects.outputs
    assert second.cached_tokens == {} and second.completed == [1, 2]
    assert r.requests[1].token_times == r.requests[2].token_times == [10.0, 12.0]


def test_forward_pass_metrics_describe_each_pass() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, max_num_seqs=2)
    r = drive(eng, [(0.0, req(1, 4, 3)), (0.0, req(2, 6, 2)), (0.0, req(3, 5, 1))])
    f0, f1 = (c.by_rank[0].effects.forward_pass_metrics for c in r.completions[:2])
    assert (f0.num_prefill_requests, f0.sum_prefill_tokens, f0.var_prefill_length) == (2, 10, 1.0)
    assert (f0.num_decode_requests, f0.num_queued_prefill, f0.sum_queued_prefill_tokens) == (0, 1, 5)
    assert f0.duration_ms == 10.0 and f0.counter_id == 0 and f0.dp_rank == 0
    # Pass 2: both decode at lengths 5 and 7 (prompt + 1 sampled token).
    assert (f1.num_decode_requests, f1.sum_decode_kv_tokens, f1.var_decode_kv_tokens) == (2, 12, 1.0)
    assert f1.num_prefill_requests == 0 and f1.duration_ms == 2.0 and f1.counter_id == 1


def test_forward_pass_metrics_off() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, emit_forward_pass_metrics=False)
    r = drive(eng, [(0.0, req(1, 4, 1))])
    assert r.completions[0].by_rank[0].effects.forward_pass_metrics is None


def test_attention_dp_ranks_have_their_own_pools() -> None:
    prompt = list(range(8))
    eng = make_engine(RecordingTiming(), block_size=4, dp_size=2, emit_kv_events=True)
    r = drive(eng, [(0.0, req(1, prompt, 2), 0), (0.0, req(2, prompt, 2), 1), (30.0, req(3, prompt, 1), 1)])
    assert r.requests[2].cached_tokens == 0  # rank 1 cannot see rank 0's blocks
    assert r.requests[3].cached_tokens == 4
    ranks = {ev.dp_rank for c in r.completions for rc in c.by_rank for ev in rc.effects.kv_events}
    assert ranks == {0, 1}
    ids = {k: [ev.event_id for c in r.completions for rc in c.by_rank if rc.dp_rank == k
               for ev in rc.effects.kv_events] for k in (0, 1)}
    assert ids[0] == list(range(len(ids[0]))) and ids[1] == list(range(len(ids[1])))


def test_plugin_registers_the_vllm_backend() -> None:
    import servesim_vllm.plugin as plugin
    from servesim.registry import Registry
    from servesim_vllm.rank import VllmRank

    registry = Registry("backend")
    plugin.servesim_register_backends(registry)
    assert registry.get("vllm") is VllmRank
    assert VllmRank.default_block_size == 64 and VllmRank.config_class is not None
    assert VllmRank.config_class() is not None
