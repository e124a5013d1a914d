"""ZeroMQ publishing: one PUB socket per (worker, dp rank), and vLLM's replay protocol.

Frames are ``[topic, seq (8-byte big-endian, from 0 per socket), payload]`` (vLLM's
``ZmqEventPublisher``; Dynamo's FPM publisher sends an empty topic). The optional ROUTER
socket answers a DEALER's ``[b"", start_seq]`` with ``[b"", topic, seq, payload]`` for every
buffered batch from ``start_seq`` on, then the end marker ``[b"", b"", ff*8, b""]``
(wire-facts.md, "Replay protocol").

The PUB socket's send high-water mark is unlimited: a replay publishes far faster than real
time, and a subscriber that is connected must not lose a batch to a full queue.
"""

from __future__ import annotations

import time
from collections import deque

import zmq
from servesim.errors import UserError
from servesim.sinks.base import SinkError

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class SinkOpenError(SinkError, UserError):
    """A socket cannot be bound (a bad or busy endpoint the user can fix; exit 2)."""


def _bind(sock: zmq.Socket, endpoint: str, label: str) -> None:
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        raise SinkOpenError(f"{label}: cannot bind {endpoint}: {exc}") from exc


class Publisher:
    """One rank's PUB socket, its sequence numbers and, optionally, its replay socket."""

    def __init__(self, ctx: zmq.Context, label: str, endpoint: str, topic: bytes,
                 replay_endpoint: str | None = None, buffer_steps: int = 0) -> None:
        self.label = label
        self.endpoint = endpoint
        self.topic = topic
        self.seq = 0
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, 0)
        _bind(self.pub, endpoint, label)
        self.replay: zmq.Socket | None = None
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=max(buffer_steps, 1))
        if replay_endpoint is not None:
            self.replay = ctx.socket(zmq.ROUTER)
            self.replay.setsockopt(zmq.SNDHWM, 0)
            try:
                _bind(self.replay, replay_endpoint, label)
            except SinkOpenError:
                self.pub.close(linger=0)
                raise

    def send(self, payload: bytes, seq: int | None = None) -> None:
        """Publish one payload with the next sequence number (or ``seq``)."""
        if seq is None:
            seq = self.seq
        self.seq = seq + 1
        self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), copy=False)
        if self.replay is not None:
            self.buffer.append((seq, payload))
            if self.replay.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                self.serve_replay()

    def serve_replay(self) -> None:
        """Answer every replay request waiting on the ROUTER socket."""
        sock = self.replay
        assert sock is not None
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = sock.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                continue  # not vLLM's request shape: vLLM's publisher ignores it too
            client, _, start = frames
            first = int.from_bytes(start, "big")
            for seq, payload in self.buffer:
                if seq >= first:
                    sock.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload))
            sock.send_multipart((client, b"", b"", END_SEQ, b""))

    def close(self, linger_ms: int) -> None:
        self.pub.close(linger=linger_ms)
        if self.replay is not None:
            self.replay.close(linger=linger_ms)


def linger(publishers: list[Publisher], seconds: float) -> None:
    """Keep the sockets open ``seconds`` of wall time, answering replay requests meanwhile."""
    poller = zmq.Poller()
    for p in publishers:
        if p.replay is not None:
            poller.register(p.replay, zmq.POLLIN)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for p in publishers:
            if p.replay is not None and p.replay.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                p.serve_replay()
        poller.poll(timeout=max(1, int(left * 1000)))
    for p in publishers:
        if p.replay is not None and p.replay.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            p.serve_replay()


__all__ = ["END_SEQ", "Publisher", "SinkOpenError", "linger"]
