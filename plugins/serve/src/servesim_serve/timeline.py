"""Where a request's wall time goes inside the server: an opt-in timeline for the overhead benchmark.

With ``SERVESIM_SERVE_TIMELINE=PATH`` set, ``servesim serve`` wraps a few methods of its
server and driver (nothing of this runs otherwise) and, when it stops, writes one JSON line
per generation request to PATH, times on the event loop's clock (monotonic seconds, the clock
other processes' ``time.monotonic()`` reads too):

- ``received``: the protocol began parsing the request (its simulated arrival);
- ``handled``: the handler began checking the body (after the event-loop hop to its task);
- ``submitted``: the request was in its engine; ``engine_ms``: the simulated time it was
  submitted at (later than the arrival when a pass ended between receipt and handling);
- ``woke``: the driver began completing the pass that gave the first token;
- ``written``: the first token's chunk was written to the socket.

A last line ``{"origin": ..., "timers": [...]}`` holds the wall time of simulated 0 and, for
every timer that ended a pass, how late after the pass end the driver began completing it
(seconds). The benchmark
(``benchmarks/serve_overhead.py --timeline``) joins these with its own send and read times.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim_serve.app import Server

ENV = "SERVESIM_SERVE_TIMELINE"


class Timeline:
    """The records of one server (see the module docstring)."""

    def __init__(self, server: Server) -> None:
        import asyncio

        self.server = server
        self.rows: dict[int, dict[str, Any]] = {}
        self.pending: set[int] = set()  # submitted, first token not yet completed
        self.timers: list[float] = []
        self._time = lambda: asyncio.get_running_loop().time()
        self._wrap()

    def _wrap(self) -> None:
        from servesim_serve.streams import Generation

        server, driver, now = self.server, self.server.driver, self._time
        rows, pending = self.rows, self.pending
        admit, complete, on_timer = server._admit, driver._complete, driver._on_timer

        def timed_admit(raw: bytes, chat: bool, received: float | None) -> Any:
            handled = now()
            out = admit(raw, chat, received)
            if isinstance(out, Generation):
                req = out.req
                rows[req.rid] = {"prompt_len": req.prompt_len, "received": received, "handled": handled,
                                 "submitted": now(), "engine_ms": driver.now, "arrival_ms": req.arrival}
                pending.add(req.rid)
                out.take = functools.partial(timed_take, out)  # type: ignore[method-assign]
            return out

        timer_for: list[float] = []  # the pass end of the timer running now, until it is timed

        def timed_complete(w: int, pass_id: int, now_ms: float) -> None:
            woke = now()
            if timer_for:
                self.timers.append(woke - driver.clock.wall_at(timer_for.pop()))
            complete(w, pass_id, now_ms)
            requests = driver.requests
            for rid in [r for r in pending if requests[r].times]:
                pending.discard(rid)
                rows[rid]["woke"] = woke
                rows[rid]["first_ms"] = requests[rid].times[0]

        def timed_on_timer() -> None:
            at = driver._timer_at
            if at is not None:
                timer_for[:] = [at]
            on_timer()
            timer_for.clear()

        def timed_take(g: Generation) -> bytes | None:
            data = Generation.take(g)
            row = rows.get(g.req.rid)
            if data is not None and row is not None and "written" not in row:
                row["written"] = now()
            return data

        server._admit = timed_admit  # type: ignore[method-assign]
        driver._complete = timed_complete  # type: ignore[method-assign,assignment]
        driver._on_timer = timed_on_timer  # type: ignore[method-assign]

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for row in self.rows.values():
                fh.write(json.dumps(row) + "\n")
            tail = {"origin": self.server.driver.clock.wall_at(0.0), "timers": self.timers}
            fh.write(json.dumps(tail) + "\n")


def install(server: Server) -> Timeline | None:
    """A :class:`Timeline` on ``server`` when ``SERVESIM_SERVE_TIMELINE`` is set."""
    return Timeline(server) if os.environ.get(ENV) else None
