"""Compact KV event records (servesim.kv.event_records): each stands for exactly the KvEvent
objects it expands to, the JSONL lines and the KV router's index treat a batch of records as
the batch of those objects, and a replay uses them only when every reader opts in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fast.event_readers import fit_to_readers
from servesim.kv.event_records import (
    ROUTER_METHODS,
    SINK_METHODS,
    RemovedRun,
    StoredRun,
    accepts_kv_records,
    count_events,
    materialise,
)
from servesim.replay.routers import KvIndex, KvRouter, RoundRobinRouter
from servesim.sinks.builtin import JsonlKvEventSink, MemoryKvEventSink
from servesim.sinks.jsonl_lines import kv_event_lines

u64 = st.integers(0, 2**64 - 1)
hashes = st.lists(u64, min_size=1, max_size=5)


@st.composite
def batches(draw) -> list[Any]:  # type: ignore[no-untyped-def]
    """Records and plain events (host-tier ones too), with consecutive ids per rank."""
    out: list[Any] = []
    next_id = draw(st.integers(0, 10**6))
    for _ in range(draw(st.integers(0, 6))):
        dp = draw(st.integers(0, 2))
        kind = draw(st.sampled_from(["removed_run", "stored_run", "object"]))
        if kind == "removed_run":
            hs = draw(st.lists(u64, max_size=5))
            out.append(RemovedRun(next_id, dp, hs))
            next_id += len(hs)
            continue
        hs = draw(hashes)
        if kind == "stored_run":
            local = [draw(u64) for _ in hs]
            out.append(StoredRun(next_id, dp, draw(st.one_of(st.none(), u64)), hs, local))
        else:
            out.append(KvEvent(next_id, dp, RemovedBlocks(tuple(hs), "CPU")))
        next_id += 1
    return out


def test_records_expand_to_the_events_they_stand_for() -> None:
    removed = RemovedRun(7, 1, [11, 12])
    stored = StoredRun(9, 1, 5, [13, 14], [3, 4])
    host = KvEvent(10, 1, RemovedBlocks((15,), "CPU"))
    assert list(materialise([removed, stored, host])) == [
        KvEvent(7, 1, RemovedBlocks((11,))),
        KvEvent(8, 1, RemovedBlocks((12,))),
        KvEvent(9, 1, StoredBlocks(5, (KvBlock(13, 3), KvBlock(14, 4)))),
        host,
    ]
    assert count_events([removed, stored, host]) == 4
    plain = [host]
    assert materialise(plain) is plain  # no record: the batch itself


@settings(max_examples=300, derandomize=True)
@given(w=st.integers(0, 100), at_ms=st.one_of(st.floats(0, 1e9), st.integers(0, 10**9)),
       batch=batches())
def test_lines_of_records_are_the_lines_of_their_events(w: int, at_ms: float, batch: list) -> None:
    assert kv_event_lines(w, at_ms, batch) == kv_event_lines(w, at_ms, list(materialise(batch)))


@settings(max_examples=200, derandomize=True)
@given(batch=batches(), more=batches())
def test_the_router_index_applies_records_as_their_events(batch: list, more: list) -> None:
    a, b = KvIndex(3), KvIndex(3)
    for evs in (batch, more):
        a.apply(1, evs)
        b.apply(1, list(materialise(evs)))
    assert a.slot_masks() == b.slot_masks()


class Overriding(JsonlKvEventSink):
    """Overrides publish without declaring records again: it must get objects."""

    def publish(self, worker_id: int, at_ms: float, events: Any) -> None:
        super().publish(worker_id, at_ms, events)


class Declaring(Overriding):
    accepts_kv_records = True


class WatchingRouter(KvRouter):
    def on_kv_events(self, worker: int, events: Any) -> None:
        super().on_kv_events(worker, events)


@pytest.mark.parametrize(("reader", "methods", "accepts"), [
    (JsonlKvEventSink, SINK_METHODS, True),
    (MemoryKvEventSink, SINK_METHODS, False),
    (Overriding, SINK_METHODS, False),
    (Declaring, SINK_METHODS, True),
    (KvRouter, ROUTER_METHODS, True),
    (WatchingRouter, ROUTER_METHODS, False),
    (RoundRobinRouter, ROUTER_METHODS, False),
])
def test_only_readers_that_declare_it_for_their_methods_accept_records(
        reader: type, methods: tuple[str, ...], accepts: bool) -> None:
    assert accepts_kv_records(reader, methods) is accepts


def _fit(sinks: list[Any], router: Any, reads: bool, observed: bool = False) -> tuple[bool, bool]:
    from servesim.config.engine import EngineConfig
    from servesim.factory import EngineFactory

    rank = pytest.importorskip("servesim_vllm.rank").VllmRank
    factory = EngineFactory(EngineConfig(), rank, object(), emit_kv_events=True)  # type: ignore[arg-type]
    readers = fit_to_readers(factory, sinks, router_reads_events=reads, record_metrics=False,
                             router=router, observed=observed)
    return readers.kv_records, readers.kv_router_only


def test_a_replay_uses_records_only_when_every_reader_accepts_them(tmp_path: Any) -> None:
    from servesim.sinks.builtin import JsonlKvSinkConfig

    jsonl = JsonlKvEventSink(JsonlKvSinkConfig(str(tmp_path / "kv.jsonl")))
    memory = MemoryKvEventSink()
    assert _fit([jsonl], KvRouter, True) == (True, False)
    assert _fit([jsonl], RoundRobinRouter, False) == (True, False)  # it reads no events
    assert _fit([jsonl], None, False) == (False, False)  # the readers are not named
    assert _fit([jsonl], WatchingRouter, True) == (False, False)
    assert _fit([jsonl, memory], KvRouter, True) == (False, False)
    assert _fit([], KvRouter, True) == (False, True)  # the router alone: coalesced instead
    # An observer plugin sees every pass's effects, KV events included: objects.
    assert _fit([jsonl], KvRouter, True, observed=True) == (False, False)
    jsonl.close()


def test_the_router_index_keeps_only_the_shared_blocks_of_a_stored_record() -> None:
    """Blocks past ``StoredRun.shared`` match no prompt: the index leaves them out (a later
    removal of them changes nothing), while the record's line lists every block."""
    idx = KvIndex(1)
    idx.apply(0, [StoredRun(0, 0, None, [1, 2, 3], [7, 8, 9], 2), StoredRun(1, 0, 3, (4,), (9,), 0)])
    assert idx.slot_masks() == {1: 1, 2: 1}
    idx.apply(0, [RemovedRun(2, 0, [3, 4, 2])])
    assert idx.slot_masks() == {1: 1}
    assert kv_event_lines(0, 1.0, [StoredRun(0, 0, None, [1, 2, 3], [7, 8, 9], 2)]) == kv_event_lines(
        0, 1.0, [StoredRun(0, 0, None, [1, 2, 3], [7, 8, 9])])
