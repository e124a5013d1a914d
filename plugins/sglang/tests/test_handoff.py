"""Disaggregated handoff on the sglang rank (servesim_sglang.handoff; aisimulate-engine.md
§8.2). Fixed timing: prefill 10 ms, decode 1 ms; pages of 4 tokens."""

from __future__ import annotations

from servesim.config.engine import EngineConfig
from servesim.contract import (
    NOOP,
    ActivateDestination,
    CancelDestination,
    DestinationReserved,
    HandoffId,
    ReleaseSource,
    Request,
    ReserveDestination,
    ResultKind,
    SourceHeld,
    StoredBlocks,
    Submit,
    SubmitHandoffPrefill,
    WorkerType,
)
from servesim.engine import Engine
from servesim.factory import EngineFactory
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig
from servesim_sglang.rank import SglangRank

H = HandoffId


def make(worker: WorkerType, blocks: int = 64, kv_events: bool = True) -> Engine:
    cfg = EngineConfig(backend="sglang", block_size=4, num_gpu_blocks=blocks, worker_type=worker,
                       kv_bytes_per_token=1e6, kv_transfer_bandwidth=1.0)
    return EngineFactory(cfg, SglangRank, FixedTiming(FixedTimingConfig(10.0, 1.0)),
                         backend_config=SglangConfig(), emit_kv_events=kv_events).build(0)


def req(rid: int, tokens: list[int], out: int) -> Request:
    return Request(rid, Tokens(tokens), out)


def step(eng: Engine, now: float):
    s = eng.execute_pass(now)
    assert s is not None
    return s.end_ms, eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects


def stored_blocks(events) -> int:
    return sum(len(e.data.blocks) for e in events if isinstance(e.data, StoredBlocks))


def test_a_held_source_enters_the_radix_tree_only_when_released() -> None:
    eng = make(WorkerType.PREFILL)
    prompt = list(range(100, 116))  # 4 pages
    eng.apply(0, SubmitHandoffPrefill(H(1), req(1, prompt, 1)), 0.0)
    end, eff = step(eng, 0.0)
    assert end == 10.0 and eff.outputs.token_request_ids == [1]
    (held,) = eff.lifecycle_events
    assert isinstance(held, SourceHeld) and held.transfer_timing.full_prompt_delay_ms() == 16.0
    assert stored_blocks(eff.kv_events) == 0 and not eng.is_drained()
    # A request with the same prompt finds nothing cached while the source is held.
    eng.apply(0, Submit(req(2, prompt, 1)), 10.0)
    start = eng.execute_pass(10.0)
    assert [(a.request_id, a.reused_input_tokens) for a in start.by_rank[0].effects.admissions] == [(2, 0)]
    eng.complete_pass(start.pass_id, start.end_ms)
    rel = eng.apply(0, ReleaseSource(H(1)), 30.0)
    assert rel.result.kind is ResultKind.APPLIED and rel.retired_requests == (1,)
    assert eng.is_drained()
    eng.apply(0, Submit(req(3, prompt, 1)), 30.0)
    start = eng.execute_pass(30.0)
    # Three whole pages match (the last token is always recomputed).
    assert [(a.request_id, a.reused_input_tokens) for a in start.by_rank[0].effects.admissions] == [(3, 12)]


def test_destination_reuses_a_radix_match_and_decodes_without_prefill() -> None:
    eng = make(WorkerType.DECODE)
    prompt = list(range(200, 212))
    eng.apply(0, ReserveDestination(H(1), req(1, prompt, 1)), 0.0)
    act = eng.apply(0, ActivateDestination(H(1)), 0.0)
    assert stored_blocks(act.kv_events) == 3
    end, eff = step(eng, 0.0)
    assert end == 1.0 and eff.outputs.completed == [1]  # one decode step, no prefill
    res = eng.apply(0, ReserveDestination(H(2), req(2, prompt + [7, 8, 9, 10, 11], 2)), 2.0)
    # 17 tokens = 5 pages; the first 3 are resident: 2 fresh pages are transferred.
    assert res.lifecycle_events == (DestinationReserved(H(2), 2, 8),)
    eng.apply(0, ActivateDestination(H(2)), 2.0)
    times = []
    now = 2.0
    while not eng.is_drained():
        now, eff = step(eng, now)
        times.append((now, list(eff.outputs.token_request_ids)))
    assert times == [(3.0, [2]), (4.0, [2])]


def test_pending_destination_waits_for_pages_and_cancel_wakes_the_next() -> None:
    eng = make(WorkerType.DECODE, blocks=8, kv_events=False)  # 32 tokens
    first = eng.apply(0, ReserveDestination(H(1), req(1, list(range(24)), 4)), 0.0)
    assert first.lifecycle_events == (DestinationReserved(H(1), 1, 24),)
    second = eng.apply(0, ReserveDestination(H(2), req(2, list(range(50, 62)), 4)), 0.0)
    assert second.result.kind is ResultKind.DESTINATION_ACCEPTED and second.lifecycle_events == ()
    assert not eng.is_ready() and not eng.is_drained()
    cancel = eng.apply(0, CancelDestination(H(1)), 1.0)
    assert cancel.retired_requests == (1,)
    assert cancel.lifecycle_events == (DestinationReserved(H(2), 2, 12),)
    assert eng.apply(0, CancelDestination(H(1)), 2.0).result == NOOP
