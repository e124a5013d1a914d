"""Optional sink protocols of the speed overlay: promises that let a replay skip work.

None of these is part of :class:`~servesim.sinks.base.KvEventSink` or
:class:`~servesim.sinks.base.FpmSink`, and a sink needs none of them: the bytes written are the
same either way. Each is kept by setting a class attribute true; the sink module needs no
import of this one. ``encodes_ahead`` is inherited like any attribute; the other two are
declared on the class that defines the sink's line-making methods
(:func:`servesim.sinks.base.declares`), so a subclass that overrides ``publish`` or ``encode``
without declaring them again does not inherit them. The built-in JSONL sinks keep all three.

* :class:`EncodesAhead` (``encodes_ahead = True``): the sink's output for a batch depends on
  that batch alone, and ``publish`` is exactly ``write_encoded(encode(...))``. A replay that
  holds output back to merge several workers' streams in one order
  (:mod:`servesim.fast.sink_merge`) then encodes each batch when it is produced and keeps only
  the encoding, so the event objects are freed at once instead of waiting in the buffer.
* ``joins_encoded = True`` (with :class:`EncodesAhead`, encodings being text): ``write_encoded``
  takes the concatenation of several encodings, as if each were written in turn (the merge
  buffer then writes each release in one call).
* :class:`EncodesFpmRuns` (``encodes_fpm_runs = True``, an FPM sink that encodes ahead):
  ``encode_run(worker_id, ats, run)`` returns one encoding per pass of a run of steady passes
  held by column (:class:`~servesim.fast.fpm_runs.FpmRun`), without building the
  ``ForwardPassMetrics`` objects.

Compact KV-event records (``accepts_kv_records``) are the fourth such promise; they belong to
the block pool's events and are described in :mod:`servesim.kv.event_records`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class EncodesAhead(Protocol):
    """A KV-event or FPM sink that splits ``publish`` into ``encode`` and ``write_encoded``."""

    encodes_ahead: bool

    def encode(self, worker_id: int, at_ms: float, payload: Any) -> Any:
        """What ``publish`` would write for this batch (or pass), computed now."""
        ...

    def write_encoded(self, data: Any) -> None:
        """Write what :meth:`encode` returned, in publication order."""
        ...


class EncodesFpmRuns(EncodesAhead, Protocol):
    """An FPM sink that encodes a run's passes from the run's columns."""

    encodes_fpm_runs: bool

    def encode_run(self, worker_id: int, ats: list[float], run: Any) -> list[Any]:
        """One encoding per pass of ``run`` (ends ``ats``), each what :meth:`encode` gives."""
        ...


def encodes_ahead(sink: Any) -> bool:
    """Whether ``sink`` keeps the :class:`EncodesAhead` promise."""
    return isinstance(sink, EncodesAhead) and bool(sink.encodes_ahead)


def all_encode_ahead(sinks: Sequence[Any]) -> bool:
    """Whether there is at least one sink and every one of ``sinks`` encodes ahead."""
    return bool(sinks) and all(encodes_ahead(sink) for sink in sinks)


__all__ = ["EncodesAhead", "EncodesFpmRuns", "all_encode_ahead", "encodes_ahead"]
