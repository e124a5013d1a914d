"""Built-in sinks for KV events and forward-pass metrics: ``memory`` and ``jsonl``, and the
composing ``tee``, ``filter`` and ``sample`` (servesim.sinks.compose)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._markers import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_kv_event_sinks(registry: Registry) -> None:
    from servesim.sinks.builtin import JsonlKvEventSink, MemoryKvEventSink
    from servesim.sinks.compose import FilterKvEventSink, SampleKvEventSink, TeeKvEventSink

    registry.add("memory", MemoryKvEventSink)
    registry.add("jsonl", JsonlKvEventSink)
    registry.add("tee", TeeKvEventSink)
    registry.add("filter", FilterKvEventSink)
    registry.add("sample", SampleKvEventSink)


@hookimpl
def servesim_register_fpm_sinks(registry: Registry) -> None:
    from servesim.sinks.builtin import JsonlFpmSink, MemoryFpmSink
    from servesim.sinks.compose import FilterFpmSink, SampleFpmSink, TeeFpmSink

    registry.add("memory", MemoryFpmSink)
    registry.add("jsonl", JsonlFpmSink)
    registry.add("tee", TeeFpmSink)
    registry.add("filter", FilterFpmSink)
    registry.add("sample", SampleFpmSink)
