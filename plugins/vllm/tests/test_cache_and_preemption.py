"""Prefix caching through the block pool and preemption under KV pressure (dynamo-mocker.md
§2.2-§2.4, aisimulate-engine.md §4.7)."""

from __future__ import annotations

from servesim.contract import PressureKind, PressureState, RemovedBlocks, StoredBlocks
from servesim.testing.driver import drive
from vllm_helpers import RecordingTiming, make_engine, req


def test_shared_prefix_is_reused_and_reported_once() -> None:
    timing = RecordingTiming()
    shared = list(range(10))
    eng = make_engine(timing, block_size=4)
    r = drive(eng, [(0.0, req(1, shared + [50, 51], 1)), (20.0, req(2, shared + [60, 61, 62], 1))])
    # Blocks 0 and 1 (8 tokens) of the common 10-token prefix are full and cached.
    assert r.requests[2].cached_tokens == 8
    assert timing.prefill_calls == [(1, 12, 0), (1, 13, 8)]
    adm = [a for p in r.passes for a in p.by_rank[0].effects.admissions]
    assert [(a.request_id, a.reused_input_tokens) for a in adm] == [(1, 0), (2, 8)]


def test_fully_cached_prompt_recomputes_its_last_block() -> None:
    """§2.3 prefix recompute rule: an 8-token block-aligned prompt seen before reuses only
    floor(7/4)*4 = 4 tokens, so the prefill forward still produces logits."""
    timing = RecordingTiming()
    prompt = list(range(8))
    r = drive(make_engine(timing, block_size=4), [(0.0, req(1, prompt, 1)), (20.0, req(2, prompt, 1))])
    assert r.requests[2].cached_tokens == 4
    assert timing.prefill_calls == [(1, 8, 0), (1, 8, 4)]
    assert r.requests[2].token_times == [30.0]


def test_blocks_cached_earlier_in_the_same_pass_are_hits() -> None:
    """§2.3: blocks finalised when request 1 is scheduled are visible to request 2 in the
    same pass (vLLM's allocate_slots caching)."""
    prompt = list(range(8))
    r = drive(make_engine(RecordingTiming(), block_size=4), [(0.0, req(1, prompt, 1)), (0.0, req(2, prompt, 1))])
    assert r.requests[1].cached_tokens == 0 and r.requests[2].cached_tokens == 4


def test_prefix_caching_off_shares_nothing() -> None:
    prompt = list(range(8))
    eng = make_engine(RecordingTiming(), block_size=4, enable_prefix_caching=False, emit_kv_events=True)
    r = drive(eng, [(0.0, req(1, prompt, 1)), (20.0, req(2, prompt, 1))])
    assert r.requests[2].cached_tokens == 0
    assert all(not rc.effects.kv_events for c in r.completions for rc in c.by_rank)
    assert r.completions[-1].by_rank[0].effects.metrics.inactive_blocks == 0


def _preemption_run(mode: str):
    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=4, preemption_mode=mode,
                      record_schedule=True)
    return eng, drive(eng, [(0.0, req(1, 4, 8)), (0.0, req(2, 4, 8))])


def test_lifo_preempts_the_newest_request_and_keeps_its_tokens() -> None:
    from servesim.config.engine import PreemptionMode

    eng, r = _preemption_run(PreemptionMode.LIFO)
    a, b = r.requests[1], r.requests[2]
    assert a.token_times == [10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0]
    # B is preempted at 18 with 5 tokens, readmitted at 24 once A finished; its prompt
    # block is still cached and the 5 generated tokens are recomputed without prefill.
    assert b.token_times == [10.0, 12.0, 14.0, 16.0, 18.0, 26.0, 28.0, 30.0]
    pressure = [(p.started_at_ms, e) for p in r.passes for e in p.by_rank[0].effects.pressure_events]
    assert len(pressure) == 1
    at, ev = pressure[0]
    assert at == ev.at_ms == 18.0 and ev.request_id == 2 and ev.kind is PressureKind.VLLM_PREEMPTION
    assert ev.state_before == PressureState(2, 0, 4)
    assert ev.state_after == PressureState(1, 1, 2)
    assert ev.request_active_blocks_before == 2
    adm = [(p.started_at_ms, a.request_id, a.reused_input_tokens)
           for p in r.passes for a in p.by_rank[0].effects.admissions]
    assert adm == [(0.0, 1, 0), (0.0, 2, 0), (24.0, 2, 4)]
    assert b.cached_tokens == 0  # cached_tokens reports the first admission
    sched = [c.by_rank[0].effects.schedule for c in r.completions]
    assert [x.scheduled for x in sched[4:9]] == [{1: 1, 2: 1}, {1: 1}, {1: 1}, {1: 1}, {2: 5}]
    assert sched[5].preempted == [2] and sched[8].resumed == [2] and sched[8].new_hits == {2: 4}
    assert eng.ranks[0].metrics().preemptions_total == 1


def test_fifo_preempts_the_oldest_request() -> None:
    from servesim.config.engine import PreemptionMode

    _, r = _preemption_run(PreemptionMode.FIFO)
    pressure = [e for p in r.passes for e in p.by_rank[0].effects.pressure_events]
    assert [e.request_id for e in pressure] == [1]
    # B (now alone) gets A's block: A's request is undone and requeued at the front.
    assert len(r.requests[1].token_times) == 8 and len(r.requests[2].token_times) == 8
    assert r.requests[2].token_times[:6] == [10.0, 12.0, 14.0, 16.0, 18.0, 20.0]


def test_preempted_request_goes_back_to_the_front_of_the_queue() -> None:
    from servesim.config.engine import PreemptionMode

    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=4, preemption_mode=PreemptionMode.LIFO)
    r = drive(eng, [(0.0, req(1, 4, 8)), (0.0, req(2, 4, 8)), (17.0, req(3, 1, 1))])
    admissions = {a.request_id: p.started_at_ms for p in r.passes for a in p.by_rank[0].effects.admissions}
    # At 18 request 2 is preempted and requeued at the front; request 3 needs one block,
    # which is free at 20, but admission is strict FIFO so it waits behind request 2.
    assert admissions[3] == 24.0 and admissions[2] == 24.0
    assert r.requests[3].token_times == [24.0 + 10.0 + 2.0]  # beside request 2's decode


def test_kv_events_order_and_visibility() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=3, emit_kv_events=True)
    started = None
    from servesim.contract import Submit

    eng.apply(0, Submit(req(1, 8, 2)), 0.0)
    started = eng.execute_pass(0.0)
    assert started is not None and started.by_rank[0].effects.kv_events == ()
    done = eng.complete_pass(started.pass_id, started.end_ms)
    ev = done.by_rank[0].effects.kv_events
    assert [e.event_id for e in ev] == [0]
    assert isinstance(ev[0].data, StoredBlocks) and ev[0].data.parent_hash is None
    assert len(ev[0].data.blocks) == 2 and ev[0].dp_rank == 0
    first_two = [b.block_hash for b in ev[0].data.blocks]
    # Finish request 1, then a new 8-token prompt needs 2 fresh blocks: one comes from the
    # free list, one by evicting request 1's tail block (Removed before the new Stored).
    while not eng.is_drained():
        s = eng.execute_pass(eng.pending_end_ms or started.end_ms)
        started = s
        eng.complete_pass(s.pass_id, s.end_ms)
    eng.apply(0, Submit(req(2, 8, 1)), 100.0)
    s = eng.execute_pass(100.0)
    ev = eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects.kv_events
    assert [type(e.data) for e in ev] == [RemovedBlocks, StoredBlocks]
    assert ev[0].data.block_hashes == (first_two[1],)
    assert [e.event_id for e in ev] == [1, 2]


def test_fifo_victim_before_the_cursor_makes_the_next_request_sit_out_the_pass() -> None:
    """Reference-peer quirk mirrored on purpose (golden preempt_fifo): request 2 needs a
    block, the FIFO victim is request 1 (already scheduled this pass, so it is undone), and
    the scan position is not shifted back, so request 3 gets no token in that pass."""
    from servesim.config.engine import PreemptionMode

    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=3,
                      preemption_mode=PreemptionMode.FIFO, record_schedule=True)
    r = drive(eng, [(0.0, req(1, 1, 4)), (0.0, req(2, 3, 4)), (0.0, req(3, 1, 4))])
    sched = [c.by_rank[0].effects.schedule.scheduled for c in r.completions]
    assert sched[:5] == [{1: 1, 2: 3, 3: 1}, {1: 1, 2: 1, 3: 1}, {2: 1}, {2: 1, 3: 1}, {3: 1, 1: 3}]
    assert r.requests[2].token_times == [10.0, 12.0, 14.0, 16.0]
    assert r.requests[3].token_times == [10.0, 12.0, 16.0, 28.0]
    # Request 1 re-prefills its 1-token prompt (+2 generated) beside request 3's decode:
    # 16 + 10 + 2; it is priced as a decoder because it already generated.
    assert r.requests[1].token_times == [10.0, 12.0, 28.0, 30.0]


def test_generated_blocks_are_hashed_stored_and_restored_identically() -> None:
    """Generated tokens are deterministic, so a block a preempted request recomputes gets
    the same hash it had before; events replay onto an index as the pool's cached set."""
    eng = make_engine(RecordingTiming(), block_size=4, num_gpu_blocks=5, emit_kv_events=True)
    r = drive(eng, [(0.0, req(1, 4, 12)), (0.0, req(2, 4, 12))])
    events = [(c.end_ms, ev) for c in r.completions for ev in c.by_rank[0].effects.kv_events]
    assert [ev.event_id for _, ev in events] == list(range(len(events)))
    kinds = [(at, type(ev.data).__name__) for at, ev in events]
    assert kinds == [(10.0, "StoredBlocks"), (10.0, "StoredBlocks"), (18.0, "StoredBlocks"),
                     (18.0, "StoredBlocks"), (26.0, "StoredBlocks"), (28.0, "RemovedBlocks"),
                     (34.0, "RemovedBlocks"), (34.0, "StoredBlocks"), (40.0, "StoredBlocks"),
                     (42.0, "RemovedBlocks")]
    a0, b0, a1, b1, a2 = (events[i][1].data.blocks[0].block_hash for i in range(5))
    # Generated block 1 of each request is chained after its prompt block.
    assert events[2][1].data.parent_hash == a0 and events[3][1].data.parent_hash == b0
    assert events[4][1].data.parent_hash == a1
    # Request 2 lost its generated block to eviction while preempted, was readmitted at 32
    # reusing only its prompt block, and recomputed that block under the same hash.
    assert events[5][1].data.block_hashes == (b1,)
    assert events[7][1].data.parent_hash == b0 and events[7][1].data.blocks[0].block_hash == b1
    adm = [(p.started_at_ms, a.request_id, a.reused_input_tokens)
           for p in r.passes for a in p.by_rank[0].effects.admissions]
    assert adm == [(0.0, 1, 0), (0.0, 2, 0), (32.0, 2, 4)]
    index: set[int] = set()
    for _, ev in events:
        if isinstance(ev.data, StoredBlocks):
            index.update(b.block_hash for b in ev.data.blocks)
        else:
            index.difference_update(ev.data.block_hashes)
    assert index == eng.ranks[0].sched.pool.cached_hashes()
    assert len(r.requests[2].token_times) == 12


def test_emit_kv_token_ids_puts_prompt_and_generated_tokens_in_stored_events() -> None:
    eng = make_engine(RecordingTiming(), block_size=4, emit_kv_events=True, emit_kv_token_ids=True)
    r = drive(eng, [(0.0, req(1, [1, 2, 3, 4, 5, 6], 4, output_token_ids=(7, 8, 9, 10)))])
    blocks = [b for c in r.completions for ev in c.by_rank[0].effects.kv_events for b in ev.data.blocks]
    # Block 1 fills when generated tokens 7 and 8 are computed (the last token never is).
    assert [b.token_ids for b in blocks] == [(1, 2, 3, 4), (5, 6, 7, 8)]
    plain = make_engine(RecordingTiming(), block_size=4, emit_kv_events=True)
    r2 = drive(plain, [(0.0, req(1, [1, 2, 3, 4, 5, 6], 4, output_token_ids=(7, 8, 9, 10)))])
    same = [b for c in r2.completions for ev in c.by_rank[0].effects.kv_events for b in ev.data.blocks]
    assert [b.token_ids for b in same] == [None, None]
    assert [b.block_hash for b in same] == [b.block_hash for b in blocks]


def test_a_request_that_outgrows_the_pool_ends_rejected_instead_of_cycling() -> None:
    """servesim's no-hang rule (documented in VllmScheduler.impossible): a lone request
    whose known tokens need more blocks than the pool has preempts itself and, since it can
    never be readmitted, ends with a rejected terminal after the tokens it produced."""
    eng = make_engine(RecordingTiming(), block_size=2, num_gpu_blocks=3)
    r = drive(eng, [(0.0, req(1, 1, 7))])
    t = r.requests[1]
    assert t.token_times == [10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
    assert t.rejected and t.completed_ms == 20.0
    pressure = [e for p in r.passes for e in p.by_rank[0].effects.pressure_events]
    assert [(e.request_id, e.at_ms) for e in pressure] == [(1, 20.0)]
    assert eng.is_drained() and eng.ranks[0].metrics().active_blocks == 0
