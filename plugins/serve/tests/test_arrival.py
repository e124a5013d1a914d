"""A request arrives when the server received it: the driver takes the receipt time, never
goes back in simulated time, and the HTTP layer stamps requests as uvicorn parses them."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from servesim_serve.cli import load
from servesim_serve.cluster import build_cluster
from servesim_serve.testing import running

FIXED = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}"]


def driver_at(wall: list[float]):
    """A live driver whose wall clock (seconds, speedup 1) is ``wall[0]``."""
    loaded, _cfg = load(None, FIXED)
    driver, _sinks = build_cluster(loaded, 1.0, lambda: wall[0])
    return driver


def test_a_request_starts_its_pass_at_its_receipt_not_at_its_handling() -> None:
    async def scenario() -> list[float]:
        wall = [0.0]
        driver = driver_at(wall)
        wall[0] = 0.007  # handled at 7 ms, received at 5 ms
        req = driver.submit([5, 6, 7], 2, arrival_ms=5.0)
        wall[0] = 0.050
        driver._catch_up()
        driver.close()
        return [req.arrival, *req.times]

    # the prefill pass starts at the receipt (5 ms) and ends 10 ms later; one decode pass
    assert asyncio.run(scenario()) == pytest.approx([5.0, 15.0, 17.0])


def test_a_request_received_before_a_handled_pass_end_joins_the_next_pass() -> None:
    async def scenario() -> tuple[list[float], list[float]]:
        wall = [0.0]
        driver = driver_at(wall)
        first = driver.submit([5, 6, 7], 3, arrival_ms=0.0)  # prefill 0..10, decodes to 14
        wall[0] = 0.0125
        driver._catch_up()  # the pass that ended at 12 ms was handled: simulated now is 12.5
        late = driver.submit([8, 9], 1, arrival_ms=11.0)  # received at 11 ms, handled after
        wall[0] = 0.100
        driver._catch_up()
        driver.close()
        return [first.arrival, *first.times], [late.arrival, *late.times]

    first, late = asyncio.run(scenario())
    assert first == pytest.approx([0.0, 10.0, 12.0, 14.0])
    # it keeps its receipt as its arrival; the engine got it at 12.5 ms (the simulation does
    # not go back), when the pass that started at 12 ms was running: it is prefilled in the
    # next one, 14 ms to 24 ms
    assert late == pytest.approx([11.0, 24.0])


def test_the_server_stamps_each_request_when_it_is_received() -> None:
    with running([*FIXED, "serve.speedup=500"]) as s:
        clock = s.server.driver.clock
        before = clock.now_ms()
        r = httpx.post(s.base + "/completions", json={"prompt": "a b", "max_tokens": 1}, timeout=30)
        after = clock.now_ms()
        (req,) = s.server.driver.requests
    assert r.status_code == 200
    assert before <= req.arrival <= after
    assert req.times == pytest.approx([req.arrival + 10.0])


def test_connections_are_served_without_nagle_s_delay() -> None:
    import socket

    from servesim_serve.cli import bind
    from servesim_serve.receipt import no_delay

    listener = bind("127.0.0.1", 0)  # the server's listening socket (default protocol number)
    client = socket.create_connection(listener.getsockname())
    conn, _addr = listener.accept()
    try:
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0  # what asyncio leaves

        class Transport:
            def get_extra_info(self, name: str) -> socket.socket:
                assert name == "socket"
                return conn

        no_delay(Transport())
        assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for sock in (conn, client, listener):
            sock.close()


def test_the_early_timer_never_releases_tokens_before_their_pass_ends() -> None:
    """The driver's timer fires EARLY_S before a pass end and waits out the rest: every pass's
    tokens reach the stream at or after the wall time of the pass end, never before."""
    import time

    from servesim_serve.driver import EARLY_S

    assert EARLY_S > 0.0
    loaded, _cfg = load(None, FIXED)

    async def scenario() -> tuple[list[float], list[float]]:
        driver, _sinks = build_cluster(loaded, 1.0, time.monotonic)  # the event loop's clock
        loop = asyncio.get_running_loop()
        released: list[float] = []
        req = driver.submit([5, 6, 7], 4)

        def push() -> bool:  # the stream's writer: note when each pass's tokens come
            released.append(loop.time())
            return True

        req.push = push
        for _ in range(200):  # bounded: 10 + 3 * 2 simulated ms at speedup 1
            if req.finished:
                break
            await asyncio.sleep(0.002)
        driver.close()
        return [driver.clock.wall_at(t) for t in req.times], released

    due, released = asyncio.run(scenario())
    assert len(due) == 4 and len(released) >= 4  # one per pass, and the end
    assert all(r >= d for r, d in zip(released, due, strict=False))
