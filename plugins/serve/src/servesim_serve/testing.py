"""A server in a background thread, for tests (this project's and a router's or gateway's).

``with running(["serve.speedup=100", ...]) as s:`` starts ``servesim serve`` with those ``--set``
overrides on 127.0.0.1 and a free port, waits (bounded) until it accepts connections, and stops
it on leaving the block; ``s.url`` is its address, ``s.server`` the :class:`Server`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from servesim_serve.app import Server
from servesim_serve.cli import bind, load, uvicorn_config, uvicorn_server

START_TIMEOUT_S = 20.0


class Running:
    """A started server: its address and its :class:`Server`."""

    def __init__(self, server: Server, url: str) -> None:
        self.server = server
        self.url = url
        self.base = url + "/v1"


@contextmanager
def running(sets: list[str], config: str | None = None) -> Iterator[Running]:
    loaded, cfg = load(config, sets)
    server = Server(loaded, cfg)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    uv = uvicorn_server(uvicorn_config(server), server, signals=False)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not uv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            uv.should_exit = True
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield Running(server, f"http://127.0.0.1:{port}")
    finally:
        uv.should_exit = True
        thread.join(START_TIMEOUT_S)
        sock.close()
        assert not thread.is_alive(), "the test server did not stop"
