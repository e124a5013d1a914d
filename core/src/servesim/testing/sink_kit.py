"""A check kit for KV-event and forward-pass-metric sinks.

``check_kv_event_sink(make_sink)`` / ``check_fpm_sink(make_sink)`` take a zero-argument
callable building a fresh, open sink (``lambda: MySink(MyConfig(path=...))``) and check what
the driver relies on (servesim.sinks.base):

* ``is_sink``: it is a :class:`~servesim.sinks.base.KvEventSink` (or :class:`~servesim.sinks.base.FpmSink`);
* ``accepts_stream``: it takes a realistic stream (KV: stored, removed and cleared batches
  from two dp ranks, an empty batch; FPM: several passes) and closes;
* ``leaves_input_alone``: publishing does not change the batch it was given (the driver
  hands the same batch to every sink and to the router);
* ``close_once_is_enough``: a second ``close`` does not raise (composing sinks may close a
  wrapped sink that was also closed on its own);
* ``no_silent_drop_after_close``: publishing after ``close`` raises instead of dropping
  events (errors are reported, never swallowed);
* ``repeatable`` (when ``read_back`` is given): two fresh sinks fed the same stream produce
  the same output, as ``read_back(sink)`` returns it after close.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from servesim.contract import (
    ClearedBlocks,
    ForwardPassMetrics,
    KvBlock,
    KvEvent,
    RemovedBlocks,
    StoredBlocks,
)
from servesim.sinks.base import FpmSink, KvEventSink
from servesim.testing.conformance import ConformanceReport
from servesim.testing.kit import run_checks

MakeSink = Callable[[], Any]
Stream = list[tuple[int, float, Any]]


def kv_stream() -> Stream:
    """``(worker, at_ms, events)`` batches as the driver publishes them."""
    stored = StoredBlocks(None, (KvBlock(11, 1), KvBlock(12, 2, (5, 6))), start_position=0)
    child = StoredBlocks(12, (KvBlock(13, 3),))
    return [
        (0, 1.5, [KvEvent(0, 0, stored)]),
        (0, 1.5, [KvEvent(1, 0, child), KvEvent(2, 0, RemovedBlocks((11,)))]),
        (1, 2.0, [KvEvent(0, 1, StoredBlocks(None, (KvBlock(21, 4),)))]),
        (1, 2.0, []),
        (0, 7.25, [KvEvent(3, 0, RemovedBlocks((12, 13))), KvEvent(4, 0, ClearedBlocks())]),
    ]


def fpm_stream() -> Stream:
    return [
        (
            w,
            t,
            ForwardPassMetrics(
                worker_id=w,
                dp_rank=d,
                counter_id=i,
                num_prefill_requests=i,
                sum_prefill_tokens=100 * i,
                num_decode_requests=3,
                duration_ms=t,
            ),
        )
        for i, (w, d, t) in enumerate([(0, 0, 1.0), (0, 1, 1.0), (1, 0, 2.5), (0, 0, 4.0)])
    ]


class _Subject:
    def __init__(
        self, make: MakeSink, base: type, stream: Callable[[], Stream], read_back: Callable[[Any], Any] | None
    ) -> None:
        self.make = make
        self.base = base
        self.stream = stream
        self.read_back = read_back


def _feed(sink: Any, stream: Stream) -> None:
    for worker, at, payload in stream:
        sink.publish(worker, at, payload)


def check_is_sink(s: _Subject) -> list[str]:
    sink = s.make()
    try:
        return [] if isinstance(sink, s.base) else [f"{type(sink).__name__} is not a {s.base.__name__}"]
    finally:
        sink.close()


def check_accepts_stream(s: _Subject) -> list[str]:
    sink = s.make()
    _feed(sink, s.stream())
    sink.close()
    return []


def check_leaves_input_alone(s: _Subject) -> list[str]:
    sink = s.make()
    stream = s.stream()
    before = [(w, t, list(p) if isinstance(p, list) else p) for w, t, p in stream]
    _feed(sink, stream)
    sink.close()
    return [] if stream == before else ["publish changed the batch it was given"]


def check_close_once_is_enough(s: _Subject) -> list[str]:
    sink = s.make()
    _feed(sink, s.stream()[:1])
    sink.close()
    sink.close()
    return []


def check_no_silent_drop_after_close(s: _Subject) -> list[str]:
    sink = s.make()
    sink.close()
    worker, at, payload = s.stream()[0]
    try:
        sink.publish(worker, at, payload)
    except Exception:
        return []
    return ["publish after close returned normally: events would be lost silently"]


def check_repeatable(s: _Subject) -> list[str]:
    if s.read_back is None:
        return []
    outputs = []
    for _ in range(2):
        sink = s.make()
        _feed(sink, s.stream())
        sink.close()
        outputs.append(s.read_back(sink))
    return [] if outputs[0] == outputs[1] else ["two sinks fed the same stream wrote different output"]


SINK_CHECKS = {
    "is_sink": check_is_sink,
    "accepts_stream": check_accepts_stream,
    "leaves_input_alone": check_leaves_input_alone,
    "close_once_is_enough": check_close_once_is_enough,
    "no_silent_drop_after_close": check_no_silent_drop_after_close,
    "repeatable": check_repeatable,
}
"""Every sink check by name, in the order the kit runs them."""


def check_kv_event_sink(
    make_sink: MakeSink,
    *,
    read_back: Callable[[Any], Any] | None = None,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run every sink check (minus ``skip``) on KV-event sinks from ``make_sink``."""
    subject = _Subject(make_sink, KvEventSink, kv_stream, read_back)
    return run_checks("kv event sink", SINK_CHECKS, subject, skip=skip, raise_on_failure=raise_on_failure)


def check_fpm_sink(
    make_sink: MakeSink,
    *,
    read_back: Callable[[Any], Any] | None = None,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run every sink check (minus ``skip``) on forward-pass-metric sinks from ``make_sink``."""
    subject = _Subject(make_sink, FpmSink, fpm_stream, read_back)
    return run_checks("fpm sink", SINK_CHECKS, subject, skip=skip, raise_on_failure=raise_on_failure)


__all__ = ["SINK_CHECKS", "check_fpm_sink", "check_kv_event_sink", "fpm_stream", "kv_stream"]
