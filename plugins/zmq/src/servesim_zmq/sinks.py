"""The ``zmq`` KV-event and FPM sinks.

Both bind their sockets in :meth:`bind` (called once by the replay, or by a live server, with
the deployment's :class:`~servesim.sinks.base.SinkDeployment`) and, in an elastic replay, those
of each worker added later in ``worker_changed``, then publish synchronously on every
:meth:`publish` call: in a replay as fast as the simulation runs, in a live server at the
wall-clock moment it calls. One ``publish`` is one frame on the rank's socket, so a replay
sends one ``KVEventBatch`` per rank per pass moment (the pass's end, or its start for
admissions' events), as vLLM sends one per engine step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from servesim.contract import ForwardPassMetrics, KvEvent
from servesim.sinks.base import FpmSink, KvEventSink, SinkDeployment, SinkError, WorkerChange
from servesim.sinks.fpm_schema import heartbeat

from servesim_zmq.config import ZmqFpmSinkConfig, ZmqKvSinkConfig


class _Sockets:
    """The publishers of one sink, one per (worker, dp rank), bound together."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.ctx: Any = None
        self.pubs: dict[tuple[int, int], Any] = {}
        self.dp_size = 1
        self.spec: tuple[str, bytes, str | None, int] = ("", b"", None, 0)
        self.closed = False

    def open(self, context: SinkDeployment, endpoint: str, topic: bytes,
             replay_endpoint: str | None = None, buffer_steps: int = 0) -> None:
        import zmq

        self.ctx = zmq.Context()
        self.dp_size = context.dp_size
        self.spec = (endpoint, topic, replay_endpoint, buffer_steps)
        try:
            for w in range(context.num_workers):
                self.add(w)
        except BaseException:
            self.close(0.0)
            raise

    def add(self, w: int) -> None:
        """Bind worker ``w``'s sockets, one per dp rank at port offset ``w * dp_size + rank``
        (at ``bind`` for the initial workers, later for a worker an elastic replay adds)."""
        from servesim_zmq.config import offset_endpoint
        from servesim_zmq.sockets import Publisher

        endpoint, topic, replay_endpoint, buffer_steps = self.spec
        for r in range(self.dp_size):
            off = w * self.dp_size + r
            replay = None if replay_endpoint is None else offset_endpoint(replay_endpoint, off)
            self.pubs[(w, r)] = Publisher(self.ctx, self.label, offset_endpoint(endpoint, off),
                                          topic, replay, buffer_steps)

    def get(self, w: int, r: int) -> Any:
        if self.closed:
            raise SinkError(f"{self.label}: publish after close")
        pub = self.pubs.get((w, r))
        if pub is None:
            raise SinkError(f"{self.label}: no socket for worker {w} dp rank {r} (bind() first)")
        return pub

    def close(self, linger_s: float) -> None:
        if self.closed:
            return
        self.closed = True
        if self.ctx is None:
            return
        from servesim_zmq.sockets import linger

        pubs = list(self.pubs.values())
        if linger_s > 0:
            linger(pubs, linger_s)
        for p in pubs:
            p.close(linger_ms=int(linger_s * 1000) + 1000)
        self.ctx.term()


class ZmqKvEventSink(KvEventSink):
    """KV events in vLLM's ZMQ wire format (servesim_zmq.encode, servesim_zmq.sockets)."""

    config_class = ZmqKvSinkConfig
    wants_token_ids = True  # Dynamo's indexer hashes the tokens of stored blocks itself

    def __init__(self, config: ZmqKvSinkConfig | None = None) -> None:
        self.config = config or ZmqKvSinkConfig()
        self._sockets = _Sockets(f"zmq kv-event sink {self.config.endpoint!r}")
        self.block_size = 0

    def bind(self, context: SinkDeployment) -> None:
        c = self.config
        self.block_size = context.block_size
        self._sockets.open(context, c.endpoint, c.topic.encode(), c.replay_endpoint, c.buffer_steps)
        if c.wait_for_subscribers_s:
            time.sleep(c.wait_for_subscribers_s)

    def worker_changed(self, change: WorkerChange) -> None:
        """An elastic replay added a worker: bind its sockets and wait
        ``wait_for_subscribers_s``, as :meth:`bind` does. A removed worker's sockets stay bound
        (and answer replay requests) until the sink closes."""
        if change.change == "added":
            self._sockets.add(change.worker_id)
            if self.config.wait_for_subscribers_s:
                time.sleep(self.config.wait_for_subscribers_s)

    def publish(self, worker_id: int, at_ms: float, events: Sequence[KvEvent]) -> None:
        if not events:
            return
        from servesim_zmq.encode import kv_batch

        dp = events[0].dp_rank
        pub = self._sockets.get(worker_id, dp)
        pub.send(kv_batch(self.config.epoch_s + at_ms / 1000.0, events, dp, self.block_size))

    def close(self) -> None:
        self._sockets.close(self.config.linger_s)


class ZmqFpmSink(FpmSink):
    """Forward-pass metrics in Dynamo's ``ForwardPassMetrics`` schema over ZMQ.

    ``counter_id`` and the frame's sequence number are stamped per socket, from 0, as Dynamo's
    publisher thread stamps them, because heartbeats take numbers too. A rank that stays idle
    for ``heartbeat_after_s`` of simulated time sends one all-zero heartbeat before its next
    pass; every rank that published sends one at the end of the run.
    """

    config_class = ZmqFpmSinkConfig

    def __init__(self, config: ZmqFpmSinkConfig | None = None) -> None:
        self.config = config or ZmqFpmSinkConfig()
        self._sockets = _Sockets(f"zmq fpm sink {self.config.endpoint!r}")
        self._last_end: dict[tuple[int, int], float] = {}
        self._idle: set[tuple[int, int]] = set()

    def bind(self, context: SinkDeployment) -> None:
        self._sockets.open(context, self.config.endpoint, b"")
        if self.config.wait_for_subscribers_s:
            time.sleep(self.config.wait_for_subscribers_s)

    def worker_changed(self, change: WorkerChange) -> None:
        """As :meth:`ZmqKvEventSink.worker_changed`; a removed worker's ranks get their end
        heartbeat when the sink closes, as every rank's."""
        if change.change == "added":
            self._sockets.add(change.worker_id)
            if self.config.wait_for_subscribers_s:
                time.sleep(self.config.wait_for_subscribers_s)

    def publish(self, worker_id: int, at_ms: float, metrics: ForwardPassMetrics) -> None:
        key = (worker_id, metrics.dp_rank)
        last = self._last_end.get(key)
        if last is not None and key not in self._idle:
            gap_ms = at_ms - metrics.duration_ms - last
            if gap_ms >= self.config.heartbeat_after_s * 1000.0:
                self.heartbeat(worker_id, metrics.dp_rank)
        self._last_end[key] = at_ms
        self._idle.discard(key)
        self._send(worker_id, metrics)

    def heartbeat(self, worker_id: int, dp_rank: int) -> None:
        """Send the all-zero idle heartbeat of one rank now (a live server calls this when a
        rank goes idle)."""
        self._send(worker_id, heartbeat(worker_id, dp_rank, 0))
        self._idle.add((worker_id, dp_rank))

    def _send(self, worker_id: int, metrics: ForwardPassMetrics) -> None:
        import attrs

        from servesim_zmq.encode import fpm_payload

        pub = self._sockets.get(worker_id, metrics.dp_rank)
        stamped = attrs.evolve(metrics, counter_id=pub.seq)
        pub.send(fpm_payload(worker_id, stamped))

    def close(self) -> None:
        if not self._sockets.closed:
            for w, r in sorted(self._last_end):
                if (w, r) not in self._idle:
                    self.heartbeat(w, r)
        self._sockets.close(self.config.linger_s)


__all__ = ["ZmqFpmSink", "ZmqKvEventSink"]
