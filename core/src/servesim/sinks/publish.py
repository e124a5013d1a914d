"""Handing batches to sinks, with every sink failure turned into a
:class:`~servesim.sinks.base.SinkError` that names the sink and the simulated time. Shared by
the replay driver and the fast path's merged and offloaded sinks (:mod:`servesim.fast`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.sinks.base import FpmSink, KvEventSink, SinkError


def publish(sink: KvEventSink | FpmSink, w: int, now: float, payload: object) -> None:
    """Hand one batch to one sink; any failure becomes a :class:`SinkError` naming it."""
    try:
        sink.publish(w, now, payload)  # type: ignore[arg-type]
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc


def encode(sink: Any, w: int, now: float, payload: object) -> object:
    """``sink.encode(...)`` (a sink that encodes ahead, servesim.fast.sink_protocols), its
    failures reported as :func:`publish` reports them."""
    try:
        return sink.encode(w, now, payload)
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc


def encode_run(sink: FpmSink, w: int, ats: list[float], run: Sequence[object]) -> list[object]:
    """``sink.encode_run(...)`` (an ``encodes_fpm_runs`` sink, :mod:`servesim.fast.fpm_runs`); on a
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


def write_encoded(sink: Any, now: float, data: object) -> None:
    """``sink.write_encoded(data)``, its failures reported as :func:`publish` reports them."""
    try:
        sink.write_encoded(data)
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc

