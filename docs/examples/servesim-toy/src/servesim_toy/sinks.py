"""A toy composing KV-event sink: counts events by type, forwards them to the sinks it wraps,
and writes the counts as one JSON object when closed."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from attrs import field, frozen
from servesim import KvEventSink
from servesim.contract import KvEvent
from servesim.sinks.base import SinkContext, SinkError


@frozen
class TallyConfig:
    """``{type: toy_tally, path: counts.json, sinks: [{type: jsonl, path: events.jsonl}]}``."""

    path: str
    sinks: tuple[dict[str, Any], ...] = field(factory=tuple)


class TallySink(KvEventSink):
    config_class = TallyConfig

    def __init__(self, path: str, wrapped: Sequence[KvEventSink] = ()) -> None:
        self.path = path
        self.wrapped = list(wrapped)
        self.counts: Counter[str] = Counter()
        self.closed = False

    @classmethod
    def from_config(cls, config: TallyConfig, context: SinkContext) -> TallySink:
        # Nested specs are built through the run's registries; a bad one is reported at
        # sinks.kv_events[i].sinks[j]... with the key that is wrong.
        return cls(config.path, context.build_all(config.sinks, "sinks"))

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        if self.closed:
            raise SinkError(f"toy_tally {self.path!r}: publish after close")
        self.counts.update(type(e.data).__name__ for e in events)
        for sink in self.wrapped:
            sink.publish(worker_id, at_ms, events)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sink in self.wrapped:
            sink.close()
        try:
            with open(self.path, "w", encoding="utf-8") as fh:
                json.dump(dict(sorted(self.counts.items())), fh)
        except OSError as exc:
            raise SinkError(f"toy_tally {self.path!r}: cannot write: {exc}") from exc
