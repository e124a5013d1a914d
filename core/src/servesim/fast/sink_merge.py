"""One canonical order for the sink output of several workers (docs/architecture.md, "Speed by design", runs of passes).

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

When every sink of a stream encodes ahead (:mod:`servesim.fast.sink_protocols`; the
built-in JSONL sinks do), a batch is encoded as it arrives and the buffer keeps only the
encodings: the event objects are freed at once rather than surviving, buffered, into the
garbage collector's older generations (which made collections the largest single cost of a
replay with sinks). Encoding depends on the batch alone, so the bytes are the same.

With ``sinks.writer: process`` a :class:`SinkMerge` runs in a writer process instead
(:mod:`servesim.fast.sink_offload`), fed the calls the driver makes here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.fast.fpm_runs import FpmRun
from servesim.fast.sink_protocols import all_encode_ahead
from servesim.sinks.base import FpmSink, KvEventSink, declares
from servesim.sinks.publish import encode, encode_runs, publish, write_encoded

# Entry kinds: the payload itself (published at release), or its encodings: one per sink,
# a tuple, except that a stream of one sink keeps its one encoding as it is.
_KV, _FPM, _KV_ENC, _FPM_ENC = 0, 1, 2, 3
# The driver releases what is complete when its time moves and the buffer holds
# servesim.replay.speed.FLUSH_AT entries (amortises the sort).


class SinkMerge:
    """Buffers sink output of several workers; :meth:`release` hands it on in order."""

    __slots__ = ("kv_sinks", "fpm_sinks", "buf", "_seq", "_min", "_kv_enc", "_fpm_enc", "_joined")

    def __init__(self, kv_sinks: Sequence[KvEventSink], fpm_sinks: Sequence[FpmSink]) -> None:
        self.kv_sinks = list(kv_sinks)
        self.fpm_sinks = list(fpm_sinks)
        self.buf: list[tuple[float, float, int, int, int, int, Any]] = []
        self._seq = 0
        self._min = float("inf")  # the earliest time buffered: nothing to release before it
        # Whether every sink of the stream encodes ahead (then entries hold encodings).
        self._kv_enc = all_encode_ahead(self.kv_sinks)
        self._fpm_enc = all_encode_ahead(self.fpm_sinks)
        # Whether every sink of both streams encodes ahead into text it takes joined: a
        # release is then one write per sink.
        self._joined = (bool(self.kv_sinks or self.fpm_sinks)
                        and (not self.kv_sinks or self._kv_enc) and (not self.fpm_sinks or self._fpm_enc)
                        and all(declares(s, "joins_encoded") for s in (*self.kv_sinks, *self.fpm_sinks)))

    def kv(self, w: int, at: float, start: float, events: Sequence[KvEvent]) -> None:
        self._seq += 1
        if self._kv_enc:
            sinks = self.kv_sinks
            enc = (encode(sinks[0], w, at, events) if len(sinks) == 1
                   else tuple([encode(sink, w, at, events) for sink in sinks]))
            self.buf.append((at, start, w, events[0].dp_rank, self._seq, _KV_ENC, enc))
        else:
            self.buf.append((at, start, w, events[0].dp_rank, self._seq, _KV, events))
        if at < self._min:
            self._min = at

    def fpm(self, w: int, at: float, start: float, metrics: ForwardPassMetrics) -> None:
        self._seq += 1
        if self._fpm_enc:
            sinks = self.fpm_sinks
            enc = (encode(sinks[0], w, at, metrics) if len(sinks) == 1
                   else tuple([encode(sink, w, at, metrics) for sink in sinks]))
            self.buf.append((at, start, w, metrics.dp_rank, self._seq, _FPM_ENC, enc))
        else:
            self.buf.append((at, start, w, metrics.dp_rank, self._seq, _FPM, metrics))
        if at < self._min:
            self._min = at

    def encoded(self, fpm: bool, w: int, at: float, start: float, dp: int, enc: Any) -> None:
        """One batch (KV, or with ``fpm`` one pass's metrics) already encoded by the stream's
        only sink, buffered as :meth:`kv` or :meth:`fpm` buffers its encoding."""
        self._seq += 1
        self.buf.append((at, start, w, dp, self._seq, _FPM_ENC if fpm else _KV_ENC, enc))
        if at < self._min:
            self._min = at

    def fpm_run_of(self, w: int, ats: list[float], start: float, run: FpmRun) -> None:
        """A run's forward-pass metrics (an ``encodes_fpm_runs`` stream), encoded by column
        by every sink and buffered as :meth:`fpm_run`."""
        self.fpm_run(w, ats, start, run.base["dp_rank"], encode_runs(self.fpm_sinks, w, ats, run))

    def fpm_run(self, w: int, ats: list[float], start: float, dp: int, encs: list[list[Any]]) -> None:
        """A run's forward-pass metrics, encoded by every sink (``encs``: per sink, one encoding
        a pass), as :meth:`fpm` of each pass would buffer them."""
        buf = self.buf
        append = buf.append
        seq = self._seq
        prev = start
        if len(encs) == 1:
            for at, enc in zip(ats, encs[0], strict=True):
                seq += 1
                append((at, prev, w, dp, seq, _FPM_ENC, enc))
                prev = at
        else:
            for at, enc in zip(ats, zip(*encs, strict=True), strict=True):
                seq += 1
                append((at, prev, w, dp, seq, _FPM_ENC, enc))
                prev = at
        self._seq = seq
        first = min(ats)
        if first < self._min:
            self._min = first

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

    def finish(self) -> None:
        """After :meth:`release_all`: everything is written (a writer process's merge,
        servesim.fast.sink_offload, waits for it here)."""

    def _emit(self, entries: list[tuple[float, float, int, int, int, int, Any]]) -> None:
        kv_sinks, fpm_sinks = self.kv_sinks, self.fpm_sinks
        if self._joined:
            if entries:
                self._emit_joined(entries)
            return
        for at, _start, w, _dp, _seq, kind, payload in entries:
            if kind >= _KV_ENC:
                sinks: Sequence[KvEventSink | FpmSink] = kv_sinks if kind == _KV_ENC else fpm_sinks
                if len(sinks) == 1:
                    write_encoded(sinks[0], at, payload)
                    continue
                for sink, data in zip(sinks, payload, strict=True):
                    write_encoded(sink, at, data)
                continue
            for sink in kv_sinks if kind == _KV else fpm_sinks:
                publish(sink, w, at, payload)

    def _emit_joined(self, entries: list[tuple[float, float, int, int, int, int, Any]]) -> None:
        """Every entry is encodings: each sink's, in order, written in one call (a failure is
        reported at the first entry's time)."""
        kv: list[Any] = []
        fpm: list[Any] = []
        for entry in entries:
            (kv if entry[5] == _KV_ENC else fpm).append(entry[6])
        at = entries[0][0]
        streams: tuple[tuple[list[Any], Sequence[KvEventSink | FpmSink]], ...] = (
            (kv, self.kv_sinks), (fpm, self.fpm_sinks))
        for stream, sinks in streams:
            if not stream:
                continue
            if len(sinks) == 1:  # the encodings themselves
                write_encoded(sinks[0], at, "".join(stream))
                continue
            for i, sink in enumerate(sinks):
                write_encoded(sink, at, "".join([enc[i] for enc in stream]))

