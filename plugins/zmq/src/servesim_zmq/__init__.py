"""servesim-zmq: KV events in vLLM's ZMQ wire format and forward-pass metrics in Dynamo's
``ForwardPassMetrics`` schema, as sinks (``type: zmq`` under ``sinks.kv_events`` and
``sinks.fpm``). See docs/wire.md."""

from servesim_zmq.config import ZmqFpmSinkConfig, ZmqKvSinkConfig
from servesim_zmq.sinks import ZmqFpmSink, ZmqKvEventSink

__all__ = ["ZmqFpmSink", "ZmqFpmSinkConfig", "ZmqKvEventSink", "ZmqKvSinkConfig"]
