"""Options of the ``zmq`` sinks (``sinks.kv_events: [{type: zmq, ...}]``, ``sinks.fpm``).

Endpoints are ``tcp://HOST:PORT``; worker ``w``'s dp rank ``r`` publishes on ``PORT + w *
dp_size + r`` (vLLM offsets a dp rank's port by its rank; servesim adds the worker, so one
replay of several workers looks like several engines). ``replay_endpoint`` gets the same
offset.
"""

from __future__ import annotations

import re
from typing import Any

from attrs import field, frozen, validators

_TCP = re.compile(r"^tcp://(?P<host>[^:/]+|\[[^\]]+\]):(?P<port>\d+)$")


def offset_endpoint(endpoint: str, offset: int) -> str:
    """``tcp://host:port`` with ``offset`` added to the port."""
    m = _TCP.match(endpoint) if isinstance(endpoint, str) else None
    if m is None:
        raise ValueError(f"expected tcp://HOST:PORT, got {endpoint!r}")
    port = int(m["port"]) + offset
    if not 0 < port < 65536:
        raise ValueError(f"{endpoint!r} plus offset {offset} is not a port")
    return f"tcp://{m['host']}:{port}"


def _endpoint(_inst: object, attribute: Any, value: str | None) -> None:
    if value is not None:
        try:
            offset_endpoint(value, 0)
        except (ValueError, TypeError) as exc:
            raise ValueError(str(exc), attribute) from None  # the key path names the field


_non_negative = validators.and_(validators.instance_of((int, float)), validators.ge(0))


@frozen
class ZmqKvSinkConfig:
    """vLLM's ``--kv-events-config`` counterparts: ``endpoint``, ``topic``,
    ``replay_endpoint``, ``buffer_steps``; plus wall-clock ``wait_for_subscribers_s`` (after
    binding, before the first batch; in an elastic replay also after binding each added
    worker's sockets) and ``linger_s`` (after the run, still answering replay
    requests). ``epoch_s`` is the batch ``ts`` of simulated time 0 (seconds; a live server sets
    its start time)."""

    endpoint: str = field(default="tcp://127.0.0.1:5557", validator=_endpoint)
    topic: str = field(default="", validator=validators.instance_of(str))
    replay_endpoint: str | None = field(default=None, validator=_endpoint)
    buffer_steps: int = field(default=10_000, validator=[validators.instance_of(int), validators.ge(1)])
    wait_for_subscribers_s: float = field(default=0.0, validator=_non_negative)
    linger_s: float = field(default=0.0, validator=_non_negative)
    epoch_s: float = field(default=0.0, validator=validators.instance_of((int, float)))


@frozen
class ZmqFpmSinkConfig:
    """Dynamo's FPM publisher: ``endpoint`` (port 20380 + offset), no topic, no replay.
    ``heartbeat_after_s``: simulated idle seconds after which a rank sends the all-zero
    heartbeat (Dynamo sends one on going idle, after 1 s)."""

    endpoint: str = field(default="tcp://127.0.0.1:20380", validator=_endpoint)
    heartbeat_after_s: float = field(default=1.0, validator=_non_negative)
    wait_for_subscribers_s: float = field(default=0.0, validator=_non_negative)
    linger_s: float = field(default=0.0, validator=_non_negative)


__all__ = ["ZmqFpmSinkConfig", "ZmqKvSinkConfig", "offset_endpoint"]
