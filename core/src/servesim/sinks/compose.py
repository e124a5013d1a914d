"""Built-in composing sinks: ``tee``, ``filter`` and ``sample``, for KV events and for
forward-pass metrics alike.

Each wraps the sinks listed under its ``sinks:`` key, built through the run's registries by
:meth:`servesim.sinks.base.SinkContext.build_all` (so they nest: a ``filter`` inside a ``tee``):

* ``tee`` publishes everything to every wrapped sink, in list order;
* ``filter`` publishes what matches every criterion given: ``workers``, ``dp_ranks``,
  ``event_types`` (KV: ``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``, the wire
  names, or the names of the classes a sink receives as ``KvEvent.data``, ``StoredBlocks``,
  ``RemovedBlocks``, ``ClearedBlocks``; FPM: ``ForwardPassMetrics``) and the simulated-time
  window ``start_ms <= at_ms < end_ms``.
  A KV batch is filtered event by event and an empty remainder is not published;
* ``sample`` publishes every ``every``-th event (KV: each event; FPM: each pass's metrics),
  starting at an offset in ``[0, every)`` drawn from ``seed``, so a seed gives the same
  sample on every run.

A composing sink asks the replay for what any wrapped sink asks (``wants_token_ids``,
``wants_token_times``) and hands ``bind`` and ``replay_done`` on to each of them.

Closing a composing sink closes every wrapped sink once, in list order; publishing to it
after that is a :class:`~servesim.sinks.base.SinkError`, even for an event it would drop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import field, frozen, validators

from servesim.contract import ClearedBlocks, ForwardPassMetrics, KvEvent, RemovedBlocks, StoredBlocks
from servesim.sinks.base import (
    FpmSink,
    KvEventSink,
    SinkContext,
    SinkDeployment,
    SinkError,
    WorkerChange,
    abandon_sinks,
    bind_sinks,
    replay_done,
    workers_changed,
)

KV_EVENT_TYPES = {
    StoredBlocks: "BlockStored",
    RemovedBlocks: "BlockRemoved",
    ClearedBlocks: "AllBlocksCleared",
}
#: The class a sink receives as ``KvEvent.data`` → its wire name: ``filter`` takes either.
KV_EVENT_CLASS_NAMES = {cls.__name__: name for cls, name in KV_EVENT_TYPES.items()}
FPM_EVENT_TYPES = ("ForwardPassMetrics",)


def _non_empty(_inst: object, attribute: Any, value: Sequence[Any]) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must list at least one sink spec, got []")


def _specs() -> Any:
    return field(validator=_non_empty)


_ints: Any = validators.optional(validators.deep_iterable(validators.instance_of(int)))


def _at_least(low: int) -> Any:
    def check(_inst: object, attribute: Any, value: int) -> None:
        if value < low:
            raise ValueError(f"{attribute.name} must be an integer >= {low}, got {value}")

    return check


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
    """Every ``every``-th event (``every`` >= 1) from a ``seed``-drawn offset (``seed`` >= 0:
    ``random.Random`` seeds with ``abs(seed)``, so a negative seed would draw its positive
    twin's sample)."""

    sinks: tuple[dict[str, Any], ...] = _specs()
    every: int = field(validator=_at_least(1))
    seed: int = field(default=0, validator=_at_least(0))


def _check_types(config: FilterConfig, known: Sequence[str], aliases: dict[str, str],
                 context: SinkContext) -> None:
    from servesim.errors import ConfigError

    for i, name in enumerate(config.event_types or ()):
        if name not in known and name not in aliases:
            also = f" (or the class names {', '.join(aliases)})" if aliases else ""
            raise ConfigError(
                f"unknown event type {name!r}; expected one of {', '.join(known)}{also}",
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


class _Wrapping:
    """What every composing sink shares: the wrapped sinks, built from ``config.sinks``;
    closing each of them once; refusing to publish after close."""

    label = "tee"
    config_class: ClassVar[type | None] = TeeConfig

    def __init__(self, sinks: Sequence[Any], config: Any = None) -> None:
        self.sinks = list(sinks)
        self.closed = False
        # What the wrapped sinks ask of the replay, asked for them (servesim.sinks.base).
        self.wants_token_ids = any(getattr(s, "wants_token_ids", False) for s in self.sinks)
        self.wants_token_times = any(getattr(s, "wants_token_times", False) for s in self.sinks)
        self.setup(config)

    def bind(self, context: SinkDeployment) -> None:
        bind_sinks(self.sinks, context)

    def worker_changed(self, change: WorkerChange) -> None:
        workers_changed(self.sinks, change)

    def replay_done(self, log: Any) -> None:
        replay_done(self.sinks, log)

    def abandon(self) -> None:
        abandon_sinks(self.sinks)

    def setup(self, config: Any) -> None:
        """Read the options (a tee has none beyond its sinks)."""

    @classmethod
    def check(cls, config: Any, context: SinkContext) -> None:
        """Reject options the config class alone cannot (a filter's event types)."""

    @classmethod
    def from_config(cls, config: Any, context: SinkContext) -> Any:
        cls.check(config, context)
        return cls(context.build_all(config.sinks, "sinks"), config)

    def _open(self) -> None:
        if self.closed:
            raise SinkError(f"{self.label} sink: publish after close")

    def close(self) -> None:
        self.closed = True
        _close_all(self.sinks)


class _Filtering(_Wrapping):
    label = "filter"
    config_class: ClassVar[type | None] = FilterConfig
    event_types: tuple[str, ...] = ()
    #: Other names ``event_types`` accepts → the name they stand for.
    aliases: ClassVar[dict[str, str]] = {}

    def setup(self, config: FilterConfig) -> None:
        self.window = _Window(config)
        self.types = None if config.event_types is None else frozenset(
            self.aliases.get(name, name) for name in config.event_types)

    @classmethod
    def check(cls, config: FilterConfig, context: SinkContext) -> None:
        _check_types(config, cls.event_types, cls.aliases, context)


class _Sampling(_Wrapping):
    label = "sample"
    config_class: ClassVar[type | None] = SampleConfig

    def setup(self, config: SampleConfig) -> None:
        self.every = config.every
        self.offset = random.Random(config.seed).randrange(config.every)
        self.seen = 0


# --------------------------------------------------------------------------- KV events


class TeeKvEventSink(_Wrapping, KvEventSink):
    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        self._open()
        for sink in self.sinks:
            sink.publish(worker_id, at_ms, events)


class FilterKvEventSink(_Filtering, KvEventSink):
    event_types = tuple(KV_EVENT_TYPES.values())
    aliases = KV_EVENT_CLASS_NAMES

    def _keeps(self, event: KvEvent) -> bool:
        dp_ranks = self.window.dp_ranks
        if dp_ranks is not None and event.dp_rank not in dp_ranks:
            return False
        return self.types is None or KV_EVENT_TYPES.get(type(event.data)) in self.types

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        self._open()
        if not self.window.admits(worker_id, at_ms):
            return
        kept = [e for e in events if self._keeps(e)]
        if kept:
            for sink in self.sinks:
                sink.publish(worker_id, at_ms, kept)


class SampleKvEventSink(_Sampling, KvEventSink):
    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        self._open()
        start, every, offset = self.seen, self.every, self.offset
        self.seen = start + len(events)
        kept = [e for i, e in enumerate(events, start) if i % every == offset]
        if kept:
            for sink in self.sinks:
                sink.publish(worker_id, at_ms, kept)


# --------------------------------------------------------------------------- forward-pass metrics


class TeeFpmSink(_Wrapping, FpmSink):
    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        self._open()
        for sink in self.sinks:
            sink.publish(worker_id, at_ms, metrics)


class FilterFpmSink(_Filtering, FpmSink):
    event_types = FPM_EVENT_TYPES

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        self._open()
        window = self.window
        # The only FPM type is ForwardPassMetrics: an empty list lets nothing through.
        if self.types is not None and not self.types or not window.admits(worker_id, at_ms):
            return
        if window.dp_ranks is not None and metrics.dp_rank not in window.dp_ranks:
            return
        for sink in self.sinks:
            sink.publish(worker_id, at_ms, metrics)


class SampleFpmSink(_Sampling, FpmSink):
    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        self._open()
        index = self.seen
        self.seen = index + 1
        if index % self.every == self.offset:
            for sink in self.sinks:
                sink.publish(worker_id, at_ms, metrics)


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
