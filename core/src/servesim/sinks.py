"""Event sinks: where KV events and forward-pass metrics go.

A sink receives events in order and must not block the simulation. Errors are reported, not
swallowed: a sink that raises stops the run with a :class:`SinkError` naming the sink. Register
sinks through ``servesim_register_kv_event_sinks`` / ``servesim_register_fpm_sinks``; sinks are
chosen by name in YAML (``sinks.kv_events: [{type: jsonl, path: ...}]``).

A sink that needs to know the deployment (ports per dp rank, block size, backend) defines
``bind(context: SinkContext)``; the replay calls it once, after building the sinks and before
the first publish. A sink with ``wants_token_times = True`` makes the replay record every
token's time, and one with ``replay_done(log)`` gets the finished replay's
:class:`~servesim.replay.stats.RequestLog` before it is closed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import frozen

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.errors import SimError


class SinkError(SimError):
    """A sink failed while receiving events."""


class KvEventSink(ABC):
    """Receives KV events as they become visible (at pass end for pass-produced events)."""

    config_class: ClassVar[type | None] = None
    #: True when the sink needs the tokens of stored blocks: the ranks then materialise them
    #: (``engine.emit_kv_token_ids``).
    wants_token_ids: bool = False

    @abstractmethod
    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        """One batch of events from one rank of one worker, visible at ``at_ms``."""

    def close(self) -> None:
        """Flush and release resources; called once at the end of a run."""


class FpmSink(ABC):
    """Receives one :class:`ForwardPassMetrics` per rank per completed pass."""

    config_class: ClassVar[type | None] = None

    @abstractmethod
    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        """One forward pass's metrics, completed at ``at_ms``."""

    def close(self) -> None:
        """Flush and release resources; called once at the end of a run."""


@frozen
class SinkContext:
    """What a sink may need to know about the replay before the first publish."""

    num_workers: int
    dp_size: int
    block_size: int
    backend: str
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None


def bind_sinks(sinks: Sequence[Any], context: SinkContext) -> None:
    """Give every sink with a ``bind(context)`` method the replay's :class:`SinkContext`."""
    for sink in sinks:
        bind = getattr(sink, "bind", None)
        if bind is not None:
            bind(context)


def replay_done(sinks: Sequence[Any], log: Any) -> None:
    """Hand the finished replay's request log to every sink with ``replay_done(log)``."""
    for sink in sinks:
        done = getattr(sink, "replay_done", None)
        if done is not None:
            done(log)


def build_sink(cls: type, config: Any) -> Any:
    return cls() if config is None else cls(config)
