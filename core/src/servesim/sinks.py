"""Event sinks: where KV events and forward-pass metrics go.

A sink receives events in order and must not block the simulation. Errors are reported, not
swallowed: a sink that raises stops the run with a :class:`SinkError` naming the sink. Register
sinks through ``servesim_register_kv_event_sinks`` / ``servesim_register_fpm_sinks``; sinks are
chosen by name in YAML (``sinks.kv_events: [{type: jsonl, path: ...}]``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.errors import SimError


class SinkError(SimError):
    """A sink failed while receiving events."""


class KvEventSink(ABC):
    """Receives KV events as they become visible (at pass end for pass-produced events)."""

    config_class: ClassVar[type | None] = None

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


def build_sink(cls: type, config: Any) -> Any:
    return cls() if config is None else cls(config)
