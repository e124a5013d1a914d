"""Handoff timing and the backend-neutral handoff bookkeeping (servesim.mechanics.handoff).

Reference: aisimulate-engine.md §8.1 (transfer formulas and the 128 ms test vector), §8.2
(lifecycle and cancel results), §4.8 (FIFO retries and the capacity generation) and §3
(suppression of a retained pass's outputs).
"""

from __future__ import annotations

from typing import Any

import pytest
from servesim.config.engine import EngineConfig
from servesim.config.loader import load_config
from servesim.contract import (
    NOOP,
    DestinationReserved,
    HandoffId,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    Request,
    ResultKind,
    SourceHeld,
    TransferTimingMode,
    WorkerType,
    prefill_handoff_delay_ms,
)
from servesim.errors import CommandRejected, ConfigError
from servesim.mechanics.handoff import (
    DestEntry,
    HandoffBook,
    SourceEntry,
    kv_bytes_per_token,
    model_kv_bytes_per_token,
    transfer_timing,
)
from servesim.tokens import Tokens


def test_reference_transfer_vector_128_tokens_1e6_bytes_1_gbps_is_128_ms() -> None:
    cfg = EngineConfig(kv_bytes_per_token=1e6, kv_transfer_bandwidth=1.0)
    timing = transfer_timing(cfg, 128)
    assert timing.full_prompt_delay_ms() == pytest.approx(128.0)
    assert timing.delay_ms(0) == pytest.approx(128.0)  # full_prompt ignores the footprint
    assert prefill_handoff_delay_ms(WorkerType.PREFILL, True, 128, 1.0, 1e6) == pytest.approx(128.0)


def test_destination_missing_mode_charges_only_the_missing_tokens() -> None:
    cfg = EngineConfig(
        kv_bytes_per_token=1000, kv_transfer_bandwidth=1.0,
        kv_transfer_timing_mode=TransferTimingMode.DESTINATION_MISSING,
    )
    timing = transfer_timing(cfg, 100)
    assert timing.delay_ms(20) == pytest.approx(0.02)
    assert timing.full_prompt_delay_ms() == pytest.approx(0.1)


def test_kv_bytes_per_token_from_model_geometry() -> None:
    # Llama-3-8B: 32 layers, 8 KV heads, head dim 128, bf16 -> 131072 B/token.
    assert model_kv_bytes_per_token(32, 8, 128, 2) == 131072.0
    cfg = EngineConfig(num_layers=32, num_kv_heads=8, head_dim=128)
    assert kv_bytes_per_token(cfg) == 131072.0
    assert kv_bytes_per_token(EngineConfig(num_layers=32, num_kv_heads=8, head_dim=128,
                                           kv_dtype_bytes=1)) == 65536.0
    # An explicit value wins; incomplete geometry gives no size (and no engine timing).
    assert kv_bytes_per_token(EngineConfig(kv_bytes_per_token=5.0, num_layers=32,
                                           num_kv_heads=8, head_dim=128)) == 5.0
    assert kv_bytes_per_token(EngineConfig(num_layers=32, head_dim=128)) is None
    assert transfer_timing(EngineConfig(kv_transfer_bandwidth=1.0), 10).delay_ms(10) is None


def test_model_geometry_keys_are_validated_with_their_key_path() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["engine.num_kv_heads=0"])
    assert info.value.path == "engine.num_kv_heads"
    with pytest.raises(ConfigError) as info:
        load_config(None, ["cluster.handoff_latency_ms=-1"])
    assert info.value.path == "cluster.handoff_latency_ms"


class FakeAdapter:
    """A pool of ``capacity`` blocks of 4 tokens; requests and holds are block counts."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.generation = 0
        self.live: dict[int, int] = {}  # request id -> blocks
        self.activated: list[int] = []

    def blocks(self, request: Request) -> int:
        return -(-len(request.prompt) // 4)

    def submit_source(self, request: Request) -> None:
        self.live[request.request_id] = self.blocks(request)
        self.used += self.blocks(request)

    def cancel_request(self, request_id: int) -> bool:
        blocks = self.live.pop(request_id, None)
        if blocks is None:
            return False
        self.used -= blocks
        self.generation += 1
        return True

    def release_held(self, entry: SourceEntry) -> None:
        self.used -= entry.state
        self.generation += 1

    def destination_problem(self, request: Request) -> str | None:
        return "too large" if self.blocks(request) > self.capacity else None

    def try_reserve(self, entry: DestEntry) -> int | None:
        need = self.blocks(entry.request)
        if self.used + need > self.capacity:
            return None
        self.used += need
        entry.state = need
        return need * 4

    def release_reserved(self, entry: DestEntry) -> None:
        self.used -= entry.state
        self.generation += 1

    def activate(self, entry: DestEntry) -> None:
        self.live[entry.request.request_id] = entry.state
        self.activated.append(entry.request.request_id)

    def capacity_generation(self) -> int:
        return self.generation

    def metrics(self) -> Metrics:
        return Metrics(active_blocks=self.used, total_blocks=self.capacity)

    def drain_kv_events(self) -> list[KvEvent]:
        return []


def req(rid: int, tokens: int) -> Request:
    return Request(rid, Tokens(list(range(tokens))), 4)


def reserved(effects: Any) -> list[int]:
    return [e.request_id for e in effects.lifecycle_events if isinstance(e, DestinationReserved)]


def test_destinations_wait_in_fifo_order_and_one_is_reserved_per_wake_up() -> None:
    fake = FakeAdapter(capacity=4)
    book = HandoffBook(fake)
    first = book.reserve(HandoffId(1), req(1, 16), pass_in_flight=False)
    assert first.result.kind is ResultKind.DESTINATION_ACCEPTED and reserved(first) == [1]
    assert first.lifecycle_events[0].transferable_prompt_tokens == 16
    # The pool is full: 2 and 3 wait; neither is reported.
    assert reserved(book.reserve(HandoffId(2), req(2, 8), pass_in_flight=False)) == []
    assert reserved(book.reserve(HandoffId(3), req(3, 4), pass_in_flight=False)) == []
    assert book.blocks_admission and not book.can_retry
    probes = book.probes
    book.retry()  # nothing was freed: the blocked head is not probed again
    assert book.probes == probes and book.drain_events() == []
    # Cancelling the reserved destination frees 4 blocks: Applied, retired, and the FIFO
    # head (2) is reserved by the same command; 3 waits for the next wake-up.
    cancel = book.cancel_destination(HandoffId(1), pass_in_flight=False, pending=None)
    assert cancel.result.kind is ResultKind.APPLIED and cancel.retired_requests == (1,)
    assert reserved(cancel) == [2]
    assert book.can_retry
    book.retry()
    assert [e.request_id for e in book.drain_events()] == [3]
    assert not book.blocks_admission
    assert book.cancel_destination(HandoffId(1), False, None).result == NOOP


def test_cancelling_a_blocked_head_retries_the_next_destination() -> None:
    fake = FakeAdapter(capacity=3)
    book = HandoffBook(fake)
    book.reserve(HandoffId(1), req(1, 8), False)  # 2 blocks, reserved
    book.reserve(HandoffId(2), req(2, 8), False)  # needs 2: blocked head
    book.reserve(HandoffId(3), req(3, 4), False)  # needs 1: fits, but waits behind 2
    eff = book.cancel_destination(HandoffId(2), False, None)
    assert eff.retired_requests == (2,) and reserved(eff) == [3]


def test_reservation_larger_than_the_pool_is_rejected_without_change() -> None:
    fake = FakeAdapter(capacity=2)
    book = HandoffBook(fake)
    with pytest.raises(CommandRejected, match="too large"):
        book.reserve(HandoffId(1), req(1, 12), False)
    assert not book.holding and not book.dests
    book.reserve(HandoffId(1), req(1, 8), False)  # the same handoff id is free to reuse
    with pytest.raises(CommandRejected, match="already registered"):
        book.reserve(HandoffId(1), req(2, 4), False)


def test_source_lifecycle_release_and_cancel_results() -> None:
    fake = FakeAdapter(capacity=8)
    book = HandoffBook(fake)
    assert book.submit_prefill(HandoffId(5), req(5, 8)).result.kind is ResultKind.SUBMITTED
    with pytest.raises(CommandRejected, match="not held"):
        book.release_source(HandoffId(5), False)
    cfg = EngineConfig(kv_bytes_per_token=1e6, kv_transfer_bandwidth=1.0)
    assert book.on_source_complete(5, 2, cfg) and not book.on_source_complete(6, 2, cfg)
    (held,) = book.drain_events()
    assert isinstance(held, SourceHeld) and held.request_id == 5
    assert held.transfer_timing.full_prompt_delay_ms() == pytest.approx(8.0)
    assert book.holding
    eff = book.release_source(HandoffId(5), False)
    assert eff.result.kind is ResultKind.APPLIED and eff.retired_requests == (5,)
    assert not book.holding and fake.used == 0
    assert book.release_source(HandoffId(5), False).result == NOOP
    assert book.cancel_source(HandoffId(5), False, None).result == NOOP


def test_mid_pass_cancel_suppresses_the_requests_outputs_and_lifecycle_events() -> None:
    fake = FakeAdapter(capacity=8)
    book = HandoffBook(fake)
    book.submit_prefill(HandoffId(1), req(1, 4))
    book.submit_prefill(HandoffId(2), req(2, 4))
    cfg = EngineConfig()
    book.on_source_complete(1, 1, cfg)
    book.on_source_complete(2, 1, cfg)
    pending = PassCompletionEffects(
        outputs=OutputBatch(token_request_ids=[1, 2], completed=[1, 2]),
        lifecycle_events=book.drain_events(),
    )
    eff = book.cancel_source(HandoffId(1), pass_in_flight=True, pending=pending)
    assert eff.result.kind is ResultKind.APPLIED and eff.suppressed_pending_output
    assert eff.retired_requests == (1,)
    assert pending.outputs.token_request_ids == [2] and pending.outputs.completed == [2]
    assert [e.request_id for e in pending.lifecycle_events] == [2]
