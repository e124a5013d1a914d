"""SinkMerge hands buffered sink output on in (time, pass start, worker, dp rank, arrival)
order, and only what is earlier than the watermark."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.fast.sink_merge import SinkMerge
from servesim.sinks.base import KvEventSink, SinkError
from servesim.sinks.builtin import (
    JsonlFpmSink,
    JsonlKvEventSink,
    JsonlKvSinkConfig,
    JsonlSinkConfig,
    MemoryFpmSink,
    MemoryKvEventSink,
)


def _ev(i: int, dp: int = 0) -> list[KvEvent]:
    return [KvEvent(i, dp, ClearedBlocks())]


def test_release_orders_by_time_start_worker_rank_and_keeps_arrival_order() -> None:
    kv, fpm = MemoryKvEventSink(), MemoryFpmSink()
    m = SinkMerge([kv], [fpm])
    m.kv(2, 10.0, 4.0, _ev(0))       # worker 2's pass from 4 ms
    m.kv(0, 10.0, 10.0, _ev(1))      # worker 0, produced at 10 ms itself (a pass start)
    m.kv(1, 10.0, 4.0, _ev(2))       # worker 1's pass from 4 ms: before worker 2's
    m.fpm(1, 10.0, 4.0, ForwardPassMetrics(worker_id=1, counter_id=7))
    m.kv(0, 8.0, 2.0, _ev(3))
    m.kv(0, 10.0, 10.0, _ev(4))      # same key as event 1: after it
    m.kv(3, 12.0, 10.0, _ev(5, dp=1))
    m.kv(3, 12.0, 10.0, _ev(6, dp=0))
    m.release(10.0)                  # only 8 ms is complete
    assert [(w, at, e.event_id) for w, at, e in kv.events] == [(0, 8.0, 3)]
    m.release(9.0)                   # nothing new before 9 ms
    assert len(kv.events) == 1
    m.release(12.0)
    assert [(w, e.event_id) for w, _at, e in kv.events] == [(0, 3), (1, 2), (2, 0), (0, 1), (0, 4)]
    assert [(w, at, f.counter_id) for w, at, f in fpm.metrics] == [(1, 10.0, 7)]
    m.release_all()
    assert [(w, e.event_id) for w, _at, e in kv.events][5:] == [(3, 6), (3, 5)]
    assert m.buf == []


def _stream(m: SinkMerge) -> None:
    m.kv(1, 10.0, 4.0, [KvEvent(0, 0, RemovedBlocks((2**64 - 1,))), KvEvent(1, 0, ClearedBlocks())])
    m.fpm(1, 10.0, 4.0, ForwardPassMetrics(worker_id=1, counter_id=7, duration_ms=6.0))
    m.kv(0, 8.0, 2.0, [KvEvent(3, 0, StoredBlocks(None, (KvBlock(5, 6),)))])
    m.fpm(0, 8.0, 2.0, ForwardPassMetrics(worker_id=0, counter_id=2, duration_ms=6.0))
    m.release(9.0)
    m.kv(2, 12.0, 10.0, [KvEvent(4, 1, RemovedBlocks((7, 8)))])
    m.release_all()


class _Deferred(KvEventSink):
    """A JSONL sink that does not encode ahead: publish at release, as any other sink."""

    def __init__(self, path: Path) -> None:
        self.inner = JsonlKvEventSink(JsonlKvSinkConfig(str(path)))

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        self.inner.publish(worker_id, at_ms, events)

    def close(self) -> None:
        self.inner.close()


def test_sinks_that_encode_ahead_keep_only_text_and_write_what_publishing_would(tmp_path: Path) -> None:
    ahead = JsonlKvEventSink(JsonlKvSinkConfig(str(tmp_path / "ahead.jsonl")))
    fpm_ahead = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "fpm_ahead.jsonl")))
    m = SinkMerge([ahead], [fpm_ahead])
    m.kv(0, 1.0, 0.0, [KvEvent(9, 0, ClearedBlocks())])
    assert m.buf[0][-1] == ('{"worker": 0, "dp_rank": 0, "at_ms": 1.0, "event_id": 9, '
                            '"type": "AllBlocksCleared"}\n')  # the encoding, not the events
    m.buf.clear()
    _stream(m)
    ahead.close()
    fpm_ahead.close()
    # The same stream through sinks that publish at release (a mixed list publishes for all).
    later = _Deferred(tmp_path / "later.jsonl")
    memory = MemoryKvEventSink()
    fpm_later = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "fpm_later.jsonl")))
    m2 = SinkMerge([later, memory], [fpm_later, MemoryFpmSink()])
    _stream(m2)
    later.close()
    fpm_later.close()
    assert (tmp_path / "ahead.jsonl").read_bytes() == (tmp_path / "later.jsonl").read_bytes()
    assert (tmp_path / "fpm_ahead.jsonl").read_bytes() == (tmp_path / "fpm_later.jsonl").read_bytes()
    assert [e.event_id for _w, _at, e in memory.events] == [3, 0, 1, 4]
    assert (tmp_path / "ahead.jsonl").read_text().count("\n") == 4


def test_an_encoding_failure_names_the_sink_and_time(tmp_path: Path) -> None:
    fpm = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "fpm.jsonl")))
    m = SinkMerge([], [fpm])
    with pytest.raises(SinkError, match=r"sink JsonlFpmSink failed at 3.0 ms: .*not JSON compliant"):
        m.fpm(0, 3.0, 1.0, ForwardPassMetrics(duration_ms=float("nan")))
    fpm.close()


class _CountingKv(JsonlKvEventSink):
    """Counts its writes; declares ``joins_encoded`` again (or not) where it overrides them."""

    def __init__(self, path: Path) -> None:
        super().__init__(JsonlKvSinkConfig(str(path)))
        self.writes = 0

    def write_encoded(self, data: str) -> None:
        self.writes += 1
        super().write_encoded(data)


class _JoiningKv(_CountingKv):
    joins_encoded = True


def test_sinks_that_join_encodings_get_one_write_a_release_with_the_same_bytes(tmp_path: Path) -> None:
    joining, counting = _JoiningKv(tmp_path / "joined.jsonl"), _CountingKv(tmp_path / "each.jsonl")
    fpm_a = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "fa.jsonl")))
    fpm_b = JsonlFpmSink(JsonlSinkConfig(str(tmp_path / "fb.jsonl")))
    m_joined, m_each = SinkMerge([joining], [fpm_a]), SinkMerge([counting], [fpm_b])
    assert m_joined._joined and not m_each._joined  # noqa: SLF001
    _stream(m_joined)
    _stream(m_each)
    for s in (joining, counting, fpm_a, fpm_b):
        s.close()
    assert (joining.writes, counting.writes) == (2, 3)  # two releases; three batches
    assert (tmp_path / "joined.jsonl").read_bytes() == (tmp_path / "each.jsonl").read_bytes()
    assert (tmp_path / "fa.jsonl").read_bytes() == (tmp_path / "fb.jsonl").read_bytes()
    assert not SinkMerge([JsonlKvEventSink(JsonlKvSinkConfig(str(tmp_path / "k.jsonl")), validating=True)],
                         [MemoryFpmSink()])._joined  # noqa: SLF001  # objects for the memory sink
