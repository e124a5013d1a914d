"""The vllm rank's pass: token timing, budgets, chunked prefill, limits (dynamo-mocker.md §2.2-§2.5)."""

from __future__ import annotations

from servesim.testing.driver import drive
from vllm_helpers import RecordingTiming, make_engine, req


def test_first_token_comes_from_the_final_prefill_forward(timing: RecordingTiming) -> None:
    """aisimulate-engine.md §13.9: Fixed(10, 2), 4-token prompt, 2 outputs → 10 and 12."""
    r = drive(make_engine(timing, block_size=4), [(0.0, req(1, 4, 2))])
    t = r.requests[1]
    assert t.token_times == [10.0, 12.0] and t.completed_ms == 12.0
    assert timing.prefill_calls == [(1, 4, 0)]
    # After the 4-token prompt and one sampled token the decode call sees (1, 5, 5).
    assert timing.decode_calls == [(1, 5, 5, 4 * 16384)]


def test_chunked_prefill_calls_follow_the_budget(timing: RecordingTiming) -> None:
    """§6.3: a 10-token prompt with budget 4 → prefill calls (1,4,0), (1,8,4), (1,10,8)."""
    r = drive(make_engine(timing, block_size=4, max_num_batched_tokens=4), [(0.0, req(1, 10, 1))])
    assert timing.prefill_calls == [(1, 4, 0), (1, 8, 4), (1, 10, 8)]
    assert timing.decode_calls == []
    assert r.requests[1].token_times == [30.0] and r.requests[1].completed_ms == 30.0


def test_concurrent_prompts_share_one_prefill_call(timing: RecordingTiming) -> None:
    drive(make_engine(timing, block_size=4), [(0.0, req(1, 4, 1)), (0.0, req(2, 4, 1))])
    assert timing.prefill_calls == [(2, 4, 0)]


def test_mixed_pass_prices_only_ongoing_decoders(timing: RecordingTiming) -> None:
    """§6.4: a prefill beside a decoder gets its first token at prefill + decode (22 ms)."""
    r = drive(make_engine(timing, block_size=4), [(0.0, req(1, 4, 3)), (5.0, req(2, 4, 2))])
    assert r.requests[1].token_times == [10.0, 22.0, 24.0]
    assert r.requests[2].token_times == [22.0, 24.0]
    assert timing.decode_calls[0] == (1, 5, 5, 65536)  # only request 1 is priced
    assert timing.decode_calls[1] == (2, 6 + 5, 5, 65536)


def test_decode_costs_one_budget_token_and_running_goes_first() -> None:
    timing = RecordingTiming()
    eng = make_engine(timing, block_size=4, max_num_batched_tokens=5, record_schedule=True)
    r = drive(eng, [(0.0, req(1, 4, 3)), (1.0, req(2, 8, 1))])
    sched = [c.by_rank[0].effects.schedule.scheduled for c in r.completions]
    # Pass 2: request 1 decodes (1 token) first, request 2 gets the remaining 4 of the budget.
    assert sched == [{1: 4}, {1: 1, 2: 4}, {1: 1, 2: 4}]
    assert r.requests[2].token_times == [34.0]
    assert r.requests[1].token_times == [10.0, 22.0, 34.0]


def test_max_num_seqs_holds_back_admission_in_fifo_order() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, max_num_seqs=2)
    r = drive(eng, [(0.0, req(1, 4, 2)), (0.0, req(2, 4, 3)), (0.0, req(3, 4, 1))])
    assert r.requests[1].token_times == [10.0, 12.0]
    assert r.requests[2].token_times == [10.0, 12.0, 24.0]
    # Request 3 is admitted only once request 1 freed its slot: prefill + decode of 2.
    assert r.requests[3].token_times == [24.0]
    order = [a.request_id for p in r.passes for a in p.by_rank[0].effects.admissions]
    assert order == [1, 2, 3]


def test_chunked_prefill_off_blocks_a_prompt_larger_than_the_remaining_budget() -> None:
    on = drive(make_engine(RecordingTiming(), block_size=4, max_num_batched_tokens=8, record_schedule=True),
               [(0.0, req(1, 6, 1)), (0.0, req(2, 6, 1))])
    off = drive(make_engine(RecordingTiming(), block_size=4, max_num_batched_tokens=8,
                            enable_chunked_prefill=False, record_schedule=True),
                [(0.0, req(1, 6, 1)), (0.0, req(2, 6, 1))])
    assert [c.by_rank[0].effects.schedule.scheduled for c in on.completions] == [{1: 6, 2: 2}, {2: 4}]
    assert [c.by_rank[0].effects.schedule.scheduled for c in off.completions] == [{1: 6}, {2: 6}]
    assert off.requests[2].token_times == [20.0]


def test_max_model_len_rejects_long_prompts_and_stops_generation() -> None:
    r = drive(make_engine(RecordingTiming(), block_size=4, max_model_len=10),
              [(0.0, req(1, 10, 5)), (0.0, req(2, 6, 100))])
    assert r.requests[1].rejected and r.requests[1].completed_ms == 0.0 + 10.0
    assert r.requests[1].token_times == []
    assert len(r.requests[2].token_times) == 4 and not r.requests[2].rejected


def test_requests_too_large_for_the_pool_are_rejected_not_hung() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=2)
    r = drive(eng, [(0.0, req(1, 9, 1)), (0.0, req(2, 8, 1)), (3.0, req(3, 12, 2))])
    assert r.requests[1].rejected and r.requests[3].rejected
    assert not r.requests[2].rejected and r.requests[2].token_times == [10.0]
    assert r.requests[1].completed_ms == 10.0  # rejection rides the pass's completion
    assert eng.is_drained()


def test_chunked_prefill_off_rejects_prompts_over_the_budget() -> None:
    eng = make_engine(RecordingTiming(), max_num_batched_tokens=8, enable_chunked_prefill=False)
    r = drive(eng, [(0.0, req(1, 9, 1))])
    assert r.requests[1].rejected


def test_zero_output_request_completes_without_a_token() -> None:
    r = drive(make_engine(RecordingTiming(), block_size=4), [(0.0, req(1, 6, 0))])
    t = r.requests[1]
    assert t.token_times == [] and t.completed_ms == 10.0 and not t.rejected
    assert t.cached_tokens == 0


def test_output_token_ids_override_the_count() -> None:
    r = drive(make_engine(RecordingTiming(), block_size=4),
              [(0.0, req(1, 4, 10, output_token_ids=(7, 8, 9)))])
    assert r.requests[1].token_times == [10.0, 12.0, 14.0]


def test_speedup_ratios_scale_prefill_and_decode() -> None:
    r = drive(make_engine(RecordingTiming(), block_size=4, speedup_ratio=2.0, decode_speedup_ratio=2.0),
              [(0.0, req(1, 4, 3))])
    assert r.requests[1].token_times == [5.0, 5.5, 6.0]


def test_drain_leaves_no_active_blocks_and_one_terminal_per_request() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=6)
    arrivals = [(float(i), req(i, 3 + i % 5, 2 + i % 4)) for i in range(12)]
    r = drive(eng, arrivals)
    terminals = [rid for c in r.completions for rc in c.by_rank for rid in rc.effects.outputs.completed]
    assert sorted(terminals) == list(range(12))
    assert all(len(r.requests[i].token_times) == 2 + i % 4 for i in range(12))
    m = r.completions[-1].by_rank[0].effects.metrics
    assert m.active_blocks == 0 and m.running_requests == 0 and m.waiting_requests == 0


def test_a_one_token_last_chunk_is_still_a_prefill(timing: RecordingTiming) -> None:
    """The plain-decode fast path must not swallow a prompt's final 1-token chunk."""
    r = drive(make_engine(timing, block_size=16, max_num_batched_tokens=4), [(0.0, req(1, 9, 2))])
    assert timing.prefill_calls == [(1, 4, 0), (1, 8, 4), (1, 9, 8)]
    assert r.requests[1].token_times == [30.0, 32.0]
    assert timing.decode_calls == [(1, 10, 10, 16 * 16384)]
