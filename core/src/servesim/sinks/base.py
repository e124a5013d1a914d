"""Event sinks: where KV events and forward-pass metrics go.

A sink receives events in order and must not block the simulation. Errors are reported, not
swallowed: a sink that raises stops the run with a :class:`SinkError` naming the sink. Register
sinks through ``servesim_register_kv_event_sinks`` / ``servesim_register_fpm_sinks``; sinks are
chosen by name in YAML (``sinks.kv_events: [{type: jsonl, path: ...}]``).

A sink is built by its class's :meth:`KvEventSink.from_config` (or :meth:`FpmSink.from_config`),
which gets the structured ``config_class`` instance and a :class:`SinkContext`. The default
calls ``cls()`` or ``cls(config)``, so a sink whose constructor takes only its config needs
nothing more; a composing sink overrides ``from_config`` and builds the sinks it wraps from
their specs with :meth:`SinkContext.build_all` (servesim.sinks.compose holds the built-in
``tee``, ``filter`` and ``sample``).
A sink that needs to know the deployment (ports per dp rank, block size, backend) defines
``bind(context: SinkDeployment)``; the replay calls it once, after building the sinks and before
the first publish. In an elastic replay, where workers come and go, a sink that defines
``worker_changed(change: WorkerChange)`` is told each time one is added or removed. A sink
with ``wants_token_times = True`` makes the replay record every
token's time, and one with ``replay_done(log)`` gets the finished replay's
:class:`~servesim.report.stats.RequestLog` before it is closed. One with ``abandon()`` is told,
before it is closed, that the run failed or was interrupted, so that what it wrote is not the
whole output (the built-in JSONL sinks then leave their file as ``PATH.partial``).

A sink may also keep promises that let a replay skip work, none of them part of the two
interfaces below and none needed: encoding a batch ahead of writing it (``encodes_ahead``,
``joins_encoded``), formatting a run of passes by column (``encodes_fpm_runs``), both in
:mod:`servesim.fast.sink_protocols`, and taking compact KV-event records
(``accepts_kv_records``, :mod:`servesim.kv.event_records`). Each is a class attribute; all but
``encodes_ahead`` are declared on the class that defines the sink's line-making methods
(:func:`declares`), so a subclass that overrides one of them without declaring the promise
again does not inherit it. The built-in JSONL sinks keep all of them; the bytes written are
the same either way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from attrs import frozen

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.errors import SimError


class SinkError(SimError):
    """A sink failed while receiving events."""


class SinkContext(Protocol):
    """What a sink's ``from_config`` may use (servesim.sinks.build.SinkBuilder implements it).

    ``kind`` is ``"kv_event_sink"`` or ``"fpm_sink"``; ``path`` is the key path of the sink
    being built (``sinks.kv_events[0]``), ``source`` the config file (or None); ``validating``
    is True under ``servesim validate``, where a sink must not create files or open sockets.
    """

    kind: str
    path: str
    source: str | None
    validating: bool

    def build(self, spec: Any, key: str) -> Any:
        """Build one sink of the same kind from ``spec`` (``{type: NAME, ...options}``) found
        at ``key`` below :attr:`path`; a problem is a ConfigError naming the full key path."""

    def build_all(self, specs: Any, key: str) -> list[Any]:
        """Build every spec of the list at ``key`` below :attr:`path`, in order."""


class KvEventSink(ABC):
    """Receives KV events as they become visible (at pass end for pass-produced events)."""

    config_class: ClassVar[type | None] = None
    #: True when the sink needs the tokens of stored blocks: the ranks then materialise them
    #: (``engine.emit_kv_token_ids``).
    wants_token_ids: bool = False

    @classmethod
    def from_config(cls, config: Any, context: SinkContext) -> KvEventSink:
        """Build from the structured ``config_class`` instance (None when there is none)."""
        return cls() if config is None else cls(config)  # type: ignore[call-arg]

    @abstractmethod
    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        """One batch of events from one rank of one worker, visible at ``at_ms``."""

    def close(self) -> None:
        """Flush and release resources; called once at the end of a run."""


class FpmSink(ABC):
    """Receives one :class:`ForwardPassMetrics` per rank per completed pass."""

    config_class: ClassVar[type | None] = None

    @classmethod
    def from_config(cls, config: Any, context: SinkContext) -> FpmSink:
        """Build from the structured ``config_class`` instance (None when there is none)."""
        return cls() if config is None else cls(config)  # type: ignore[call-arg]

    @abstractmethod
    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        """One forward pass's metrics, completed at ``at_ms``."""

    def close(self) -> None:
        """Flush and release resources; called once at the end of a run."""


@frozen
class SinkDeployment:
    """What a sink may need to know about the replay before the first publish (what
    ``bind`` gets; not the build-time :class:`SinkContext`)."""

    num_workers: int
    dp_size: int
    block_size: int
    backend: str
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    max_loras: int | None = None  # engine.max_loras with LoRA on, else None
    #: With LoRA on, the served names of engine.lora_modules by id (others: adapter-<id>).
    lora_names: dict[int, str] | None = None


def lora_deployment(engine: Any) -> dict[str, Any]:
    """:class:`SinkDeployment`'s LoRA fields for the engine section ``engine``: ``max_loras``
    and the served adapter names by id (``lora_modules``' ``name``), None with LoRA off."""
    if not engine.enable_lora:
        return {"max_loras": None, "lora_names": None}
    names = {m.id: m.name for m in engine.lora_modules if m.name is not None}
    return {"max_loras": engine.max_loras, "lora_names": names}


def bind_sinks(sinks: Sequence[Any], context: SinkDeployment) -> None:
    """Give every sink with a ``bind(context)`` method the replay's :class:`SinkDeployment`."""
    for sink in sinks:
        bind = getattr(sink, "bind", None)
        if bind is not None:
            bind(context)


@frozen
class WorkerChange:
    """A worker joining or leaving the cluster of an elastic replay (docs/elastic.md), told to
    every sink that defines ``worker_changed(change)``.

    ``change`` is ``"added"`` when a planner adds the worker (it is ``starting`` then and
    publishes nothing until it serves) and ``"removed"`` when it stops (after its drain, or at
    once; its ``AllBlocksCleared`` events are published just before). A crashed worker that
    restarts keeps its id and is neither: its ``AllBlocksCleared`` says its cache is gone.
    Workers present from the start are counted in :attr:`SinkDeployment.num_workers` and get
    no ``added``."""

    worker_id: int
    at_ms: float
    change: str
    pool: str
    dp_size: int


def workers_changed(sinks: Sequence[Any], change: WorkerChange) -> None:
    """Tell every sink with a ``worker_changed(change)`` method; a failure is a
    :class:`SinkError` naming the sink and the simulated time."""
    for sink in sinks:
        told = getattr(sink, "worker_changed", None)
        if told is not None:
            try:
                told(change)
            except Exception as exc:
                raise SinkError(f"sink {type(sink).__name__} failed at {change.at_ms} ms: {exc}") from exc


def replay_done(sinks: Sequence[Any], log: Any) -> None:
    """Hand the finished replay's request log to every sink with ``replay_done(log)``."""
    for sink in sinks:
        done = getattr(sink, "replay_done", None)
        if done is not None:
            done(log)

def abandon_sinks(sinks: Sequence[Any]) -> None:
    """Tell every sink with ``abandon()`` that the run failed or was interrupted (see the
    module docs)."""
    for sink in sinks:
        abandon = getattr(sink, "abandon", None)
        if abandon is not None:
            abandon()


def build_sink(cls: type, config: Any, context: SinkContext | None = None) -> Any:
    """``cls.from_config(config, context)``; a class that is not a servesim sink (a bare
    callable registered as one) is called like a constructor."""
    from_config = getattr(cls, "from_config", None)
    if from_config is None:
        return cls() if config is None else cls(config)
    return from_config(config, context)


#: The methods that make a sink's output: a promise about it is declared at or below them.
LINE_METHODS = ("publish", "encode", "encode_run", "write_encoded")


def declares(sink: Any, name: str, methods: tuple[str, ...] = LINE_METHODS) -> bool:
    """Whether ``sink``'s class (or ``sink`` itself, when it is a class) sets the class
    attribute ``name`` true in a class that is, or derives from, every class defining one of
    ``methods``: a subclass that overrides one of them without declaring ``name`` again does
    not inherit the promise. An attribute set on an instance is not a class-level promise."""
    if isinstance(sink, type):
        mro = sink.__mro__
    elif name in getattr(sink, "__dict__", {}):
        return False
    else:
        mro = type(sink).__mro__
    owner = next((c for c in mro if name in c.__dict__), None)
    if owner is None or not owner.__dict__[name]:
        return False
    for method in methods:
        definer = next((c for c in mro if method in c.__dict__), None)
        # The MRO, not issubclass: compiled (mypyc) subclasses of an ABC share its subclass
        # caches, so one isinstance against a sibling class can poison issubclass(C, C).
        if definer is not None and definer not in owner.__mro__:
            return False
    return True
