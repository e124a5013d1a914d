"""One canonical order for the sink output of several workers (DESIGN.md §7, runs of passes).

Stepping hands each KV-event batch and forward-pass record to the sinks as it happens; a run of
passes hands over a whole run's output when the run completes. With one worker both orders
are the same; with several, the interleaving of workers would depend on whether runs were
taken. :class:`SinkMerge` removes that dependence: it buffers every worker's output and hands
it on sorted by ``(time, pass start, worker, dp rank, arrival)``, releasing only what is
earlier than the driver's *watermark* — the current time, or the first pass end of a run
still in flight if that is earlier — so nothing can arrive later that sorts before it.

Pass start is the start of the pass whose completion produced the output; output produced at
a pass start, a submission or internal work counts as starting at its own time. At one time,
then, the passes that started earlier come first, as the driver completes them, and within a
worker the order it emitted in is kept.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.replay.failures import publish
from servesim.sinks import FpmSink, KvEventSink

_KV, _FPM = 0, 1
# Buffered entries before a time step tries to release some: amortises the sort.
FLUSH_AT = 512


class SinkMerge:
    """Buffers sink output of several workers; :meth:`release` hands it on in order."""

    __slots__ = ("kv_sinks", "fpm_sinks", "buf", "_seq", "_min")

    def __init__(self, kv_sinks: Sequence[KvEventSink], fpm_sinks: Sequence[FpmSink]) -> None:
        self.kv_sinks = list(kv_sinks)
        self.fpm_sinks = list(fpm_sinks)
        self.buf: list[tuple[float, float, int, int, int, int, Any]] = []
        self._seq = 0
        self._min = float("inf")  # the earliest time buffered: nothing to release before it

    def kv(self, w: int, at: float, start: float, events: Sequence[KvEvent]) -> None:
        self._seq += 1
        self.buf.append((at, start, w, events[0].dp_rank, self._seq, _KV, events))
        if at < self._min:
            self._min = at

    def fpm(self, w: int, at: float, start: float, metrics: ForwardPassMetrics) -> None:
        self._seq += 1
        self.buf.append((at, start, w, metrics.dp_rank, self._seq, _FPM, metrics))
        if at < self._min:
            self._min = at

    def release(self, watermark: float) -> None:
        """Hand on, in order, everything buffered at a time before ``watermark``."""
        if watermark <= self._min:
            return
        buf = self.buf
        buf.sort()
        cut = bisect_left(buf, (watermark,))
        out = buf[:cut]
        del buf[:cut]
        self._min = buf[0][0] if buf else float("inf")
        self._emit(out)

    def release_all(self) -> None:
        self.buf.sort()
        out, self.buf = self.buf, []
        self._min = float("inf")
        self._emit(out)

    def _emit(self, entries: list[tuple[float, float, int, int, int, int, Any]]) -> None:
        kv_sinks, fpm_sinks = self.kv_sinks, self.fpm_sinks
        for at, _start, w, _dp, _seq, kind, payload in entries:
            for sink in kv_sinks if kind == _KV else fpm_sinks:
                publish(sink, w, at, payload)
