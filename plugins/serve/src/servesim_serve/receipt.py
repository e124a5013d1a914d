"""When a request came in: uvicorn's httptools protocol, noting the moment in the scope.

A request's simulated arrival is the moment the server received it, not the later moment its
handler runs (on a busy event loop the handler can start milliseconds later). The protocol
stamps the event loop's time when it starts parsing a request's bytes (``on_message_begin``,
inside ``data_received``) in the scope, as an ASGI extension: ``scope["extensions"][RECEIPT]
["received"]``. Requests that come without it (another ASGI server) arrive when they are
handled.

It also offers each request a :class:`ChunkWriter` (``scope["extensions"][RECEIPT]["writer"]``)
that writes a chunked body message that is not the last as uvicorn's own write does, and the
last through uvicorn's ``send`` run to its end, both at once, without the ``await send(...)``
of a task; and that tells when the connection is lost (:meth:`ChunkWriter.watch`, from the
protocol's ``connection_lost``), without a task waiting on ``receive``. A stream's tokens then
go out from the driver's wake-up itself (servesim_serve.streams), one event-loop hop sooner and
without resuming the stream's coroutines, whenever uvicorn's ``send`` would not have waited
either.

It also bounds what one connection may hold before its request reaches the app
(docs/serve.md, "Limits"): a request line and headers over ``max_header_bytes`` are answered
431 and the connection closed (counted as the bytes come, so a header never completed cannot
grow without bound either), and a connection that has not completed a request's headers within
``header_timeout_s`` of opening (or of its previous response's end) is closed. uvicorn's own
keep-alive timeout covers only idle connections: a client that sends its headers a byte at a
time would otherwise hold its connection for ever.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

RECEIPT = "servesim.receipt"
_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


class ChunkWriter:
    """Writes non-final body chunks of one response as uvicorn's ``RequestResponseCycle.send``
    does (chunked encoding: size line, bytes, CRLF), but synchronously; only while
    :meth:`ready`: the response has started in chunked encoding and is not complete, the
    client is connected and the transport is not paused (where ``send`` would wait)."""

    __slots__ = ("cycle", "on_lost", "_watched")

    def __init__(self, cycle: Any, watched: set[ChunkWriter]) -> None:
        self.cycle = cycle
        self.on_lost: Callable[[], None] | None = None
        self._watched = watched  # the connection's writers with an on_lost (ReceiptProtocol)

    def watch(self, on_lost: Callable[[], None]) -> None:
        """Call ``on_lost`` if the connection is lost before the response is complete (or
        now, if it already was): the protocol tells, with no task reading ``receive``."""
        if self.cycle.disconnected:
            on_lost()
            return
        self.on_lost = on_lost
        self._watched.add(self)

    def unwatch(self) -> None:
        self.on_lost = None
        self._watched.discard(self)

    def ready(self) -> bool:
        c = self.cycle
        return (c.response_started and not c.response_complete and not c.disconnected
                and c.chunked_encoding is True and not c.flow.write_paused)

    def write(self, body: bytes) -> None:
        self.cycle.transport.write(b"%x\r\n%s\r\n" % (len(body), body))

    def finish(self, body: bytes) -> None:
        """Write the last body message and complete the response: uvicorn's own ``send``,
        run to its end at once (while :meth:`ready` it has nothing to wait for)."""
        step = self.cycle.send({"type": "http.response.body", "body": body, "more_body": False})
        try:
            step.send(None)
        except StopIteration:
            return
        step.close()
        raise RuntimeError("the response's last message had to wait")  # ready() rules this out


def chunk_writer(scope: Any) -> ChunkWriter | None:
    """The :class:`ChunkWriter` of the request of ``scope``, if its protocol gave one."""
    return scope.get("extensions", {}).get(RECEIPT, {}).get("writer")


def received_at(scope: Any) -> float | None:
    """The event loop's time when the request of ``scope`` was received, if stamped."""
    return scope.get("extensions", {}).get(RECEIPT, {}).get("received")


def no_delay(transport: Any) -> None:
    """Turn Nagle's algorithm off on the TCP connection of ``transport`` (see ReceiptProtocol)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class ReceiptProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol plus the receipt stamp, with Nagle's algorithm
    off on every connection.

    asyncio turns it off only for sockets created with ``proto=IPPROTO_TCP``
    (``base_events._set_nodelay``), which a listening socket made with the default protocol
    number does not pass on to the connections it accepts. With it on, a chunk written while
    the previous one is unacknowledged waits for the client's delayed ACK: a lone stream's
    first token reached its client some 25-40 ms late.

    :meth:`limited` gives the protocol with the head limits (module docstring); this class
    itself has none."""

    max_header_bytes: int | None = None
    header_timeout_s: float | None = None

    @classmethod
    def limited(cls, max_header_bytes: int, header_timeout_s: float) -> type[ReceiptProtocol]:
        return type("LimitedReceiptProtocol", (cls,), {"max_header_bytes": max_header_bytes,
                                                       "header_timeout_s": header_timeout_s})

    def connection_made(self, transport: Any) -> None:
        no_delay(transport)
        self._watched: set[ChunkWriter] = set()
        self._head = 0  # bytes of the request head received so far; -1 once it is complete
        self._head_seen = 0  # its request line and headers as parsed
        self._refused = False  # answered 431: nothing more is read
        self._head_timer: Any = None
        super().connection_made(transport)
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self.header_timeout_s is not None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        idle = self.cycle is None or self.cycle.response_complete
        if self._head >= 0 and idle and not self.transport.is_closing():
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._head >= 0:
            self._head += len(data)
        super().data_received(data)
        limit = self.max_header_bytes
        if limit is not None and self._head > limit:
            self._refused = True
        if self._refused and not self.transport.is_closing():
            from servesim_serve import wire

            body = wire.dumps(wire.error_body(
                f"the request's headers exceed {limit} bytes (serve.max_header_bytes)",
                "Request Header Fields Too Large", 431)).encode("utf-8")
            self.transport.write(_HEAD_TOO_LARGE % (len(body), body))
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self._note_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._note_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _note_head(self, n: int) -> None:
        self._head_seen += n
        if self.max_header_bytes is not None and self._head_seen > self.max_header_bytes:
            self._refused = True

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._head = self._head_seen = 0  # the next request's head, should one come

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._cancel_head_timer()
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)
        watched, self._watched = self._watched, set()
        for writer in watched:
            on_lost = writer.on_lost
            if on_lost is not None and not writer.cycle.response_complete:
                on_lost()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions = self.scope.setdefault("extensions", {})  # kept, should uvicorn set some
        extensions[RECEIPT] = {"received": self.loop.time()}

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._head = -1
        self._cancel_head_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # this request's (not an upgrade)
            self.scope["extensions"][RECEIPT]["writer"] = ChunkWriter(cycle, self._watched)
