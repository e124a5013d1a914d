"""Disaggregated handoff on the trtllm rank (servesim_trtllm.handoff; aisimulate-engine.md
§8.2). Fixed timing: prefill 10 ms, decode 2 ms, block size 4."""

from __future__ import annotations

from collections.abc import Callable

import pytest
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
    SubmitHandoffPrefill,
    WorkerType,
)
from servesim.engine import Engine
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]
H = HandoffId


def req(rid: int, prompt: list[int] | int, out: int) -> Request:
    toks = prompt if isinstance(prompt, list) else [rid * 1000 + i for i in range(prompt)]
    return Request(rid, Tokens(toks), out)


def step(eng: Engine, now: float):
    s = eng.execute_pass(now)
    assert s is not None
    return s.end_ms, eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects


def test_prefill_worker_holds_the_prompt_kv_until_released(make_engine: MakeEngine) -> None:
    eng = make_engine(block_size=4, num_gpu_blocks=16, worker_type=WorkerType.PREFILL,
                      kv_bytes_per_token=1e6, kv_transfer_bandwidth=2.0)
    eng.apply(0, SubmitHandoffPrefill(H(1), req(1, 10, 1)), 0.0)
    end, eff = step(eng, 0.0)
    assert end == 10.0  # prefill only: no decode time on a prefill worker
    assert eff.outputs.token_request_ids == [1] and eff.outputs.completed == [1]
    (held,) = eff.lifecycle_events
    assert isinstance(held, SourceHeld) and held.transfer_timing.full_prompt_delay_ms() == 5.0
    assert eff.metrics.active_blocks == 3 and not eng.is_drained()
    rel = eng.apply(0, ReleaseSource(H(1)), 20.0)
    assert rel.retired_requests == (1,) and rel.metrics.active_blocks == 0 and eng.is_drained()


def test_decode_worker_gets_no_prefix_credit_and_decodes_without_prefill(
    make_engine: MakeEngine,
) -> None:
    eng = make_engine(block_size=4, num_gpu_blocks=16, worker_type=WorkerType.DECODE)
    prompt = list(range(8))
    eng.apply(0, ReserveDestination(H(1), req(1, prompt, 1)), 0.0)
    eng.apply(0, ActivateDestination(H(1)), 0.0)
    end, eff = step(eng, 0.0)
    assert end == 2.0 and eff.outputs.completed == [1]
    # The prompt's blocks are cached now, but TRT-LLM reserves the whole prompt again.
    res = eng.apply(0, ReserveDestination(H(2), req(2, prompt + [50, 51], 2)), 5.0)
    assert res.lifecycle_events == (DestinationReserved(H(2), 2, 12),)
    eng.apply(0, ActivateDestination(H(2)), 5.0)
    times = []
    now = 5.0
    while not eng.is_drained():
        now, eff = step(eng, now)
        times.append((now, list(eff.outputs.token_request_ids)))
    assert times == [(7.0, [2]), (9.0, [2])]


def test_reservation_waits_for_the_whole_sequence_under_no_evict(make_engine: MakeEngine) -> None:
    eng = make_engine(block_size=4, num_gpu_blocks=10, worker_type=WorkerType.DECODE)
    # 8 prompt tokens + 12 outputs: 2 blocks now, 5 reserved to completion.
    first = eng.apply(0, ReserveDestination(H(1), req(1, 8, 12)), 0.0)
    assert first.lifecycle_events == (DestinationReserved(H(1), 1, 8),)
    # 4 + 16 tokens need 5 blocks: only 10 - 5 = 5 remain... exactly enough.
    assert eng.apply(0, ReserveDestination(H(2), req(2, 4, 16)), 0.0).lifecycle_events
    # Nothing is left for a third, although only 3 of 10 blocks are physically used.
    third = eng.apply(0, ReserveDestination(H(3), req(3, 4, 1)), 0.0)
    assert third.lifecycle_events == () and third.metrics.active_blocks == 3
    # Cancelling the first destination returns its 5 blocks and wakes the third.
    cancel = eng.apply(0, CancelDestination(H(1)), 1.0)
    assert cancel.result.kind is ResultKind.APPLIED and cancel.retired_requests == (1,)
    assert cancel.lifecycle_events == (DestinationReserved(H(3), 3, 4),)
    assert eng.apply(0, CancelDestination(H(1)), 2.0).result == NOOP


@pytest.mark.parametrize("policy", ["guaranteed_no_evict", "max_utilization"])
def test_cancelling_an_activated_destination_frees_its_blocks(
    make_engine: MakeEngine, policy: str
) -> None:
    eng = make_engine(policy, block_size=4, num_gpu_blocks=10, worker_type=WorkerType.DECODE)
    eng.apply(0, ReserveDestination(H(1), req(1, 8, 3)), 0.0)
    eng.apply(0, ActivateDestination(H(1)), 0.0)
    eff = eng.apply(0, CancelDestination(H(1)), 0.0)  # activated, not yet admitted
    assert eff.retired_requests == (1,) and eff.metrics.active_blocks == 0
    assert eng.is_drained() and not eng.is_ready()
