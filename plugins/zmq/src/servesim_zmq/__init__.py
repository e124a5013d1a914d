"""servesim-zmq: KV events in vLLM's ZMQ wire format and forward-pass metrics in Dynamo's
``ForwardPassMetrics`` schema, as sinks (``type: zmq`` under ``sinks.kv_events`` and
``sinks.fpm``). See docs/wire.md.

Importing the package is cheap: the sinks and their configs load on first attribute access,
so plugin discovery imports none of them."""

from __future__ import annotations

from typing import Any

__all__ = ["ZmqFpmSink", "ZmqFpmSinkConfig", "ZmqKvEventSink", "ZmqKvSinkConfig"]


def __getattr__(name: str) -> Any:
    if name in ("ZmqFpmSink", "ZmqKvEventSink"):
        from servesim_zmq import sinks

        return getattr(sinks, name)
    if name in ("ZmqFpmSinkConfig", "ZmqKvSinkConfig"):
        from servesim_zmq import config

        return getattr(config, name)
    raise AttributeError(name)
