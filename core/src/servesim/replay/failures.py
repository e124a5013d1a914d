"""How a replay fails: :class:`ReplayError`, and sink failures turned into
:class:`~servesim.sinks.SinkError`. Shared by the driver and its run bookkeeping
(:mod:`servesim.replay.runs`), which the driver imports, so neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence

from servesim.errors import SimError
from servesim.sinks import FpmSink, KvEventSink, SinkError


class ReplayError(SimError):
    """The simulation cannot make progress (a stalled or livelocked engine)."""


def publish(sink: KvEventSink | FpmSink, w: int, now: float, payload: object) -> None:
    """Hand one batch to one sink; any failure becomes a :class:`SinkError` naming it."""
    try:
        sink.publish(w, now, payload)  # type: ignore[arg-type]
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc


def encode(sink: KvEventSink | FpmSink, w: int, now: float, payload: object) -> object:
    """``sink.encode(...)`` (an ``encodes_ahead`` sink), its failures reported as :func:`publish`
    reports them."""
    try:
        return sink.encode(w, now, payload)  # type: ignore[arg-type]
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc


def encode_run(sink: FpmSink, w: int, ats: list[float], run: Sequence[object]) -> list[object]:
    """``sink.encode_run(...)`` (an ``encodes_fpm_runs`` sink, :mod:`servesim.fpm_runs`); on a
    failure each pass is encoded on its own, so the error names the pass's time, as stepping
    reports it."""
    try:
        return sink.encode_run(w, ats, run)  # type: ignore[attr-defined]
    except Exception as exc:
        for at, metrics in zip(ats, run, strict=True):
            encode(sink, w, at, metrics)
        raise SinkError(f"sink {type(sink).__name__} failed at {ats[0]} ms: {exc}") from exc


def encode_runs(sinks: Sequence[FpmSink], w: int, ats: list[float], run: Sequence[object]) -> list[list[object]]:
    """:func:`encode_run` by each of ``sinks``, in order."""
    return [encode_run(sink, w, ats, run) for sink in sinks]


def write_encoded(sink: KvEventSink | FpmSink, now: float, data: object) -> None:
    """``sink.write_encoded(data)``, its failures reported as :func:`publish` reports them."""
    try:
        sink.write_encoded(data)
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc


_publish = publish  # the name the driver and disaggregated replay import
