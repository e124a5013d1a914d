"""Built-in sinks for KV events and forward-pass metrics: ``memory`` and ``jsonl``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._markers import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_kv_event_sinks(registry: Registry) -> None:
    from servesim.sinks_builtin import JsonlKvEventSink, MemoryKvEventSink

    registry.add("memory", MemoryKvEventSink)
    registry.add("jsonl", JsonlKvEventSink)


@hookimpl
def servesim_register_fpm_sinks(registry: Registry) -> None:
    from servesim.sinks_builtin import JsonlFpmSink, MemoryFpmSink

    registry.add("memory", MemoryFpmSink)
    registry.add("jsonl", JsonlFpmSink)
