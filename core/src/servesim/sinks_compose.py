"""Built-in composing sinks: ``tee``, ``filter`` and ``sample``, for KV events and for
forward-pass metrics alike.

Each wraps the sinks listed under its ``sinks:`` key, built through the run's registries by
:meth:`servesim.sinks.SinkContext.build_all` (so they nest: a ``filter`` inside a ``tee``):

* ``tee`` publishes everything to every wrapped sink, in list order;
* ``filter`` publishes what matches every criterion given: ``workers``, ``dp_ranks``,
  ``event_types`` (KV: ``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``; FPM:
  ``ForwardPassMetrics``) and the simulated-time window ``start_ms <= at_ms < end_ms``.
  A KV batch is filtered event by event and an empty remainder is not published;
* ``sample`` publishes every ``every``-th event (KV: each event; FPM: each pass's metrics),
  starting at an offset in ``[0, every)`` drawn from ``seed``, so a seed gives the same
  sample on every run.

Closing a composing sink closes every wrapped sink once, in list order; publishing to it
after that is a :class:`~servesim.sinks.SinkError`, even for an event it would drop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from attrs import field, frozen, validators

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.sinks import FpmSink, KvEventSink, SinkContext, SinkError

KV_EVENT_TYPES = {
    StoredBlocks: "BlockStored",
    RemovedBlocks: "BlockRemoved",
    ClearedBlocks: "AllBlocksCleared",
}
FPM_EVENT_TYPES = ("ForwardPassMetrics",)


def _non_empty(_inst: object, attribute: Any, value: Sequence[Any]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must list at least one sink spec, got []")


def _specs() -> Any:
    return field(validator=_non_empty)


_ints = validators.optional(validators.deep_iterable(validators.instance_of(int)))


@frozen(kw_only=True)
class TeeConfig:
    """``sinks``: the specs of the sinks to publish to (at least one)."""

    sinks: tuple[dict[str, Any], ...] = _specs()


@frozen(kw_only=True)
class FilterConfig:
    """The wrapped ``sinks`` and the criteria; an unset criterion lets everything through."""

    sinks: tuple[dict[str, Any], ...] = _specs()
    workers: tuple[int, ...] | None = field(default=None, validator=_ints)
    dp_ranks: tuple[int, ...] | None = field(default=None, validator=_ints)
    event_types: tuple[str, ...] | None = None
    start_ms: float | None = None
    end_ms: float | None = None


@frozen(kw_only=True)
class SampleConfig:
    """Every ``every``-th event (``every`` >= 1) from a ``seed``-drawn offset."""

    sinks: tuple[dict[str, Any], ...] = _specs()
    every: int = field(validator=validators.ge(1))
    seed: int = 0


def _check_types(config: FilterConfig, known: Sequence[str], context: SinkContext) -> None:
    from servesim.errors import ConfigError

    for i, name in enumerate(config.event_types or ()):
        if name not in known:
            raise ConfigError(
                f"unknown event type {name!r}; expected one of {', '.join(known)}",
                path=f"{context.path}.event_types[{i}]",
                source=context.source,
            )
    if config.start_ms is not None and config.end_ms is not None and config.end_ms < config.start_ms:
        raise ConfigError(
            f"must be >= start_ms ({config.start_ms}), got {config.end_ms}",
            path=f"{context.path}.end_ms",
            source=context.source,
        )


class _Window:
    """The criteria of a ``filter`` that do not depend on the event's kind."""

    def __init__(self, config: FilterConfig) -> None:
        self.workers = None if config.workers is None else frozenset(config.workers)
        self.dp_ranks = None if config.dp_ranks is None else frozenset(config.dp_ranks)
        self.start = config.start_ms
        self.end = config.end_ms

    def admits(self, worker_id: int, at_ms: float) -> bool:
        if self.workers is not None and worker_id not in self.workers:
            return False
        if self.start is not None and at_ms < self.start:
            return False
        return self.end is None or at_ms < self.end


def _close_all(sinks: Sequence[Any]) -> None:
    """Close every sink even when one fails; the first failure is then raised."""
    first: Exception | None = None
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


def _offset(config: SampleConfig) -> int:
    return random.Random(config.seed).randrange(config.every)


# --------------------------------------------------------------------------- KV events


class TeeKvEventSink(KvEventSink):
    config_class = TeeConfig

    def __init__(self, sinks: Sequence[KvEventSink]) -> None:
        self.sinks = list(sinks)
        self.closed = False

    @classmethod
    def from_config(cls, config: TeeConfig, context: SinkContext) -> TeeKvEventSink:
        return cls(context.build_all(config.sinks, "sinks"))

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        for sink in self.sinks:
            sink.publish(worker_id, at_ms, events)

    def close(self) -> None:
        self.closed = True
        _close_all(self.sinks)


class FilterKvEventSink(TeeKvEventSink):
    config_class = FilterConfig  # type: ignore[assignment]

    def __init__(self, sinks: Sequence[KvEventSink], config: FilterConfig) -> None:
        super().__init__(sinks)
        self.window = _Window(config)
        self.dp_ranks = self.window.dp_ranks
        self.types = None if config.event_types is None else frozenset(config.event_types)

    @classmethod
    def from_config(cls, config: FilterConfig, context: SinkContext) -> FilterKvEventSink:  # type: ignore[override]
        _check_types(config, tuple(KV_EVENT_TYPES.values()), context)
        return cls(context.build_all(config.sinks, "sinks"), config)

    def _keeps(self, event: KvEvent) -> bool:
        if self.dp_ranks is not None and event.dp_rank not in self.dp_ranks:
            return False
        return self.types is None or KV_EVENT_TYPES.get(type(event.data)) in self.types

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        if self.closed:
            raise SinkError("filter kv-event sink: publish after close")
        if not self.window.admits(worker_id, at_ms):
            return
        kept = [e for e in events if self._keeps(e)]
        if kept:
            super().publish(worker_id, at_ms, kept)


class SampleKvEventSink(TeeKvEventSink):
    config_class = SampleConfig  # type: ignore[assignment]

    def __init__(self, sinks: Sequence[KvEventSink], config: SampleConfig) -> None:
        super().__init__(sinks)
        self.every = config.every
        self.offset = _offset(config)
        self.seen = 0

    @classmethod
    def from_config(cls, config: SampleConfig, context: SinkContext) -> SampleKvEventSink:  # type: ignore[override]
        return cls(context.build_all(config.sinks, "sinks"), config)

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        if self.closed:
            raise SinkError("sample kv-event sink: publish after close")
        start, every, offset = self.seen, self.every, self.offset
        self.seen = start + len(events)
        kept = [e for i, e in enumerate(events, start) if i % every == offset]
        if kept:
            super().publish(worker_id, at_ms, kept)


# --------------------------------------------------------------------------- forward-pass metrics


class TeeFpmSink(FpmSink):
    config_class = TeeConfig

    def __init__(self, sinks: Sequence[FpmSink]) -> None:
        self.sinks = list(sinks)
        self.closed = False

    @classmethod
    def from_config(cls, config: TeeConfig, context: SinkContext) -> TeeFpmSink:
        return cls(context.build_all(config.sinks, "sinks"))

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        for sink in self.sinks:
            sink.publish(worker_id, at_ms, metrics)

    def close(self) -> None:
        self.closed = True
        _close_all(self.sinks)


class FilterFpmSink(TeeFpmSink):
    config_class = FilterConfig  # type: ignore[assignment]

    def __init__(self, sinks: Sequence[FpmSink], config: FilterConfig) -> None:
        super().__init__(sinks)
        self.window = _Window(config)
        # The only FPM type is ForwardPassMetrics: an empty list lets nothing through.
        self.none = config.event_types is not None and not config.event_types

    @classmethod
    def from_config(cls, config: FilterConfig, context: SinkContext) -> FilterFpmSink:  # type: ignore[override]
        _check_types(config, FPM_EVENT_TYPES, context)
        return cls(context.build_all(config.sinks, "sinks"), config)

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        if self.closed:
            raise SinkError("filter fpm sink: publish after close")
        window = self.window
        if self.none or not window.admits(worker_id, at_ms):
            return
        if window.dp_ranks is not None and metrics.dp_rank not in window.dp_ranks:
            return
        super().publish(worker_id, at_ms, metrics)


class SampleFpmSink(TeeFpmSink):
    config_class = SampleConfig  # type: ignore[assignment]

    def __init__(self, sinks: Sequence[FpmSink], config: SampleConfig) -> None:
        super().__init__(sinks)
        self.every = config.every
        self.offset = _offset(config)
        self.seen = 0

    @classmethod
    def from_config(cls, config: SampleConfig, context: SinkContext) -> SampleFpmSink:  # type: ignore[override]
        return cls(context.build_all(config.sinks, "sinks"), config)

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        if self.closed:
            raise SinkError("sample fpm sink: publish after close")
        index = self.seen
        self.seen = index + 1
        if index % self.every == self.offset:
            super().publish(worker_id, at_ms, metrics)


__all__ = [
    "FilterConfig",
    "FilterFpmSink",
    "FilterKvEventSink",
    "SampleConfig",
    "SampleFpmSink",
    "SampleKvEventSink",
    "TeeConfig",
    "TeeFpmSink",
    "TeeKvEventSink",
]
