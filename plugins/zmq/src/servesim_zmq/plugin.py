"""Entry-point module of servesim-zmq: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_kv_event_sinks(registry: Registry) -> None:
    """``zmq``: KV events in vLLM's ZMQ wire format (servesim_zmq.sinks)."""
    registry.add_lazy("zmq", "servesim_zmq.sinks:ZmqKvEventSink")


@hookimpl
def servesim_register_fpm_sinks(registry: Registry) -> None:
    """``zmq``: forward-pass metrics in Dynamo's ForwardPassMetrics schema over ZMQ."""
    registry.add_lazy("zmq", "servesim_zmq.sinks:ZmqFpmSink")
