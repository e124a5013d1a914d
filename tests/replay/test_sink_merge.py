"""SinkMerge hands buffered sink output on in (time, pass start, worker, dp rank, arrival)
order, and only what is earlier than the watermark."""

from __future__ import annotations

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent
from servesim.replay.sink_merge import SinkMerge
from servesim.sinks_builtin import MemoryFpmSink, MemoryKvEventSink


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
