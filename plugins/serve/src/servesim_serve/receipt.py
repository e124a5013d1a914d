"""When a request came in: uvicorn's httptools protocol, noting the moment in the scope.

A request's simulated arrival is the moment the server received it, not the later moment its
handler runs (on a busy event loop the handler can start milliseconds later). The protocol
stamps the event loop's time when it starts parsing a request's bytes (``on_message_begin``,
inside ``data_received``) in the scope, as an ASGI extension: ``scope["extensions"][RECEIPT]
["received"]``. Requests that come without it (another ASGI server) arrive when they are
handled.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

RECEIPT = "servesim.receipt"


def received_at(scope: Any) -> float | None:
    """The event loop's time when the request of ``scope`` was received, if stamped."""
    return scope.get("extensions", {}).get(RECEIPT, {}).get("received")


class ReceiptProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol plus the receipt stamp."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions = self.scope.setdefault("extensions", {})  # kept, should uvicorn set some
        extensions[RECEIPT] = {"received": self.loop.time()}
