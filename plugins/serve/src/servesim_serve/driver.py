"""The live driver: the same engines, cluster state and router as ``servesim run``, driven by
requests as they arrive and paced by :class:`~servesim_serve.clock.SimClock`.

It follows the replay's loop (servesim.replay.driver; aisimulate-engine.md §12) with
wall-clock arrivals: a request arrives at the simulated time its HTTP request came in, is
routed and submitted; an idle ready engine starts a pass at once; the pass's tokens are
released when the event loop's clock reaches the simulated end of that pass, and the next
pass starts at that simulated end, so an engine's passes stay back to back in simulated time
however late the event loop wakes. Everything due at one simulated time is done in the
replay's order: pass ends, then due internal work, then arrivals, then new passes. Sinks publish
at the wall-clock moment the pass ends. Stepping only: runs of passes (docs/architecture.md, "Speed by design") are a
replay speed-up the live driver does not need.

All of it runs on the event loop's thread; HTTP handlers call :meth:`LiveDriver.submit` and
:meth:`LiveDriver.cancel` directly.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from servesim.contract import CancelRequest, KvEvent, Request, Submit
from servesim.engine import Engine
from servesim.errors import CommandRejected, SimError
from servesim.kv.adapter_hashes import adapter_sequence
from servesim.replay.cluster import ClusterState
from servesim.replay.routers import Router
from servesim.sinks.base import FpmSink, KvEventSink, SinkError
from servesim.tokens import Tokens

from servesim_serve.clock import SimClock
from servesim_serve.observer import Observer
from servesim_serve.records import LiveRequest

_PASS_END, _DEADLINE = 0, 1
# An engine's effect-free zero-duration passes at one simulated time before it waits for the
# next external event (the replay's livelock guard would raise; a server keeps serving).
MAX_ZERO_PASSES = 64
# Streams woken per event-loop iteration after a pass (see LiveDriver._wake_some).
WAKE_BATCH = 16
# How much sooner than a pass end (wall seconds) the driver's timer fires (LiveDriver._on_timer):
# asyncio's epoll selector rounds a wait up to whole milliseconds, so a timer set for the moment
# itself fired 0 to 1 ms after it.
EARLY_S = 0.001


class LiveDriver:
    """Owns simulated time for a running server (see the module docstring)."""

    def __init__(self, engines: Sequence[Engine], router: Router, clock: SimClock, *,
                 block_size: int, kv_sinks: Sequence[KvEventSink] = (),
                 fpm_sinks: Sequence[FpmSink] = (), observer: Observer | None = None) -> None:
        self.engines = list(engines)
        self.router = router
        self.block_size = block_size
        self.state = ClusterState(len(self.engines), self.engines[0].dp_size)
        self.kv_sinks = list(kv_sinks)
        self.fpm_sinks = list(fpm_sinks)
        self.max_in_flight = 0
        self.preemptions = 0
        self.passes = 0
        self.pass_busy_ms = [0.0] * len(self.engines)  # simulated ms each worker spent in passes
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._dirty: set[int] = set()
        self._zero = [0] * len(self.engines)
        self._deadline_at: list[float | None] = [None] * len(self.engines)  # deadline on the heap
        self._init_streams(clock, observer)

    def _init_streams(self, clock: SimClock, observer: Observer | None) -> None:
        """The state of the requests, their streams and the timer (what a driver of another
        simulation, servesim_serve.disagg_driver, shares with this one)."""
        self.clock = clock
        self.observer = observer or Observer()
        self.requests: list[LiveRequest] = []
        self.in_flight = 0
        self.queued = 0  # submitted, no first token and no end yet (serve.max_queued_requests)
        self.pool_spans: Any = None  # cluster.pools: servesim.replay.pools.PoolSpan per pool
        self.now = 0.0  # the latest simulated time acted on
        self._timer: asyncio.Handle | None = None
        self._timer_at: float | None = None
        self._yielded = False  # the early timer has let the loop run once (see _on_timer)
        self.failure: SimError | None = None  # what stopped the simulation, if anything
        self._to_wake: deque[LiveRequest] = deque()  # streams with new tokens, to wake
        self._waking = False

    # -- commands (called by the HTTP layer) -------------------------------------------

    def submit(self, prompt: list[int], max_tokens: int, thinking: int = 0,
               arrival_ms: float | None = None, lora: int = 0) -> LiveRequest:
        """Route and submit one request; returns its live record (rejected requests are
        already finished).

        ``arrival_ms`` is the simulated time the server received the request (default: now),
        and the request's arrival. The engine gets it then, or, when the simulation has
        already acted on a later moment (a pass ended between the request's receipt and its
        handling), at that moment: the simulation never goes back."""
        if arrival_ms is None:
            now = self._catch_up()
            arrival_ms = now
        else:
            now = max(arrival_ms, self.now)
            self._advance(now)
            self.now = now
            arrival_ms = min(arrival_ms, now)
        rid = len(self.requests)
        req = LiveRequest(rid, len(prompt), max_tokens, thinking, arrival_ms)
        req.lora = lora
        self.requests.append(req)
        request = Request(rid, Tokens(prompt, ints=True), max_tokens, lora=lora)
        hashes = request.prompt.block_hashes(self.block_size)[0] if self.router.wants_block_hashes else ()
        if lora and hashes:  # the adapter is part of every block hash (servesim.kv.adapter_hashes)
            hashes = adapter_sequence(request.prompt.block_hashes(self.block_size)[1], lora, hashes)
        worker, dp = self.router.select(request, hashes, self.state)
        self.router.routed(request, worker, dp, self.state)
        req.worker, req.dp_rank = worker, dp
        self.in_flight += 1
        self.queued += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self._zero[worker] = 0
        engine = self.engines[worker]
        self._internal_if_due(worker, now)
        try:
            effects = engine.apply(dp, Submit(request), now)
        except CommandRejected:
            req.rejected = True
            self._terminal(req, now)
        else:
            self._kv(worker, now, effects.kv_events)
            self.observer.arrived(req, effects.metrics)
        self._dirty.add(worker)
        self._start_passes(now)
        self._arm()
        return req

    def cancel(self, req: LiveRequest) -> None:
        """The client went away: cancel the request on its engine, freeing its blocks."""
        if req.finished:
            return
        try:
            now = self._catch_up()
            if req.done_ms >= 0.0 or req.aborted:  # it ended in the passes that just completed
                return
            effects = self.engines[req.worker].apply(req.dp_rank, CancelRequest(req.rid), now)
            self._kv(req.worker, now, effects.kv_events)
        except SimError as exc:
            self.fail(exc)
            return
        req.cancelled = True
        self._terminal(req, now)
        self.observer.cancelled(req, effects.metrics)
        self.observer.flush()
        self._zero[req.worker] = 0
        self._dirty.add(req.worker)
        self._start_passes(now)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- time ---------------------------------------------------------------------------

    def _catch_up(self) -> float:
        """Complete everything due by the simulated time now; returns that time."""
        now = max(self.clock.now_ms(), self.now)
        self._advance(now)
        self.now = now
        return now

    def _advance(self, until: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= until:
            at = heap[0][0]
            self.now = at
            while heap and heap[0][0] == at:
                _t, _s, kind, w, pass_id = heapq.heappop(heap)
                if kind == _PASS_END:
                    self._complete(w, pass_id, at)
                else:
                    self._dirty.add(w)
            self._start_passes(at)

    def _arm(self) -> None:
        """Keep one timer on the event loop for the earliest pending pass end or deadline."""
        at = self._heap[0][0] if self._heap else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            loop = asyncio.get_running_loop()
            self._yielded = False
            self._timer = loop.call_at(self.clock.wall_at(at) - EARLY_S, self._on_timer)

    def _on_timer(self) -> None:
        at = self._timer_at
        if at is not None:
            loop = asyncio.get_running_loop()
            early = self.clock.wall_at(at) - loop.time()
            if early > 0.0:
                if not self._yielded:
                    # Early (by at most EARLY_S): first let the loop poll its sockets and run
                    # what is ready, then look again in its next iteration.
                    self._yielded = True
                    self._timer = loop.call_soon(self._on_timer)
                    return
                # Then wait out the rest (under EARLY_S) in a precise sleep rather than by
                # spinning the loop (which cost some 3 us of CPU a chunk at 100 streams).
                time.sleep(min(early, EARLY_S))
        self._yielded = False
        self._timer = self._timer_at = None
        # The loop fired at or after the wall time of ``at``: that moment has come, even if
        # rounding puts the clock a hair before it.
        now = max(self.clock.now_ms(), self.now, at if at is not None else 0.0)
        try:
            self._advance(now)
        except SimError as exc:
            self.fail(exc)
            return
        self.now = now
        self._arm()

    def fail(self, exc: SimError) -> None:
        """The simulation cannot go on (a poisoned engine, a failing sink): every request in
        flight ends as aborted and the server answers new ones with an error."""
        self.failure = exc
        self.close()
        print(f"servesim serve: the simulation stopped: {exc}", file=sys.stderr, flush=True)
        for req in self.requests:
            if not req.finished:
                req.aborted = True
                self._aborted(req)
                req.notify()
        # Its requests are gone: /metrics counts them finished (aborted) and its scheduler
        # gauges read zero, though the engines, no longer stepped, still hold them.
        self.observer.flush()
        self.observer.stopped()

    def _aborted(self, req: LiveRequest) -> None:
        """``req`` was aborted by the simulation's stop: the counts and the observer."""
        if not req.times:
            self.queued -= 1
        self.in_flight -= 1
        self.observer.finished(req)

    def _push(self, at: float, kind: int, w: int, pass_id: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, w, pass_id))

    # -- passes -------------------------------------------------------------------------

    def _internal_if_due(self, w: int, now: float) -> None:
        engine = self.engines[w]
        if engine.pass_in_flight:
            return
        d = engine.next_internal_deadline_ms()
        if d is not None and d <= now:
            for dp, eff in engine.process_internal_work(now):
                self._absorb_start(w, dp, eff, now)

    def _start_passes(self, now: float) -> None:
        dirty = sorted(self._dirty)
        self._dirty.clear()
        for w in dirty:
            engine = self.engines[w]
            if engine.pass_in_flight:
                continue
            self._internal_if_due(w, now)
            d = engine.next_internal_deadline_ms()
            if d is not None and d > now and self._deadline_at[w] != d:
                self._deadline_at[w] = d
                self._push(d, _DEADLINE, w)
            if not engine.is_ready() or self._zero[w] >= MAX_ZERO_PASSES:
                continue
            started = engine.execute_pass(now)
            if started is None:
                continue
            self.passes += 1
            self.pass_busy_ms[w] += started.end_ms - now
            for rs in started.by_rank:
                self._absorb_start(w, rs.dp_rank, rs.effects, now)
            self._zero[w] = self._zero[w] + 1 if started.end_ms == now else 0
            self._push(started.end_ms, _PASS_END, w, started.pass_id)

    def _absorb_start(self, w: int, dp: int, eff: Any, now: float) -> None:
        for adm in eff.admissions:
            req = self.requests[adm.request_id]
            req.reused = adm.reused_input_tokens
            if req.admitted < 0:
                req.admitted = now
        if eff.pressure_events:
            self.preemptions += len(eff.pressure_events)
            self.observer.preempted(w, len(eff.pressure_events), dp)
        self._kv(w, now, eff.kv_events)

    def _complete(self, w: int, pass_id: int, now: float) -> None:
        done = self.engines[w].complete_pass(pass_id, now)
        self._dirty.add(w)
        requests = self.requests
        firsts: list[LiveRequest] = []
        ended: list[LiveRequest] = []
        for rc in done.by_rank:
            eff = rc.effects
            out = eff.outputs
            for rid, cached in out.cached_tokens.items():
                if requests[rid].cached is None:
                    requests[rid].cached = cached
            emitted: dict[int, int] = {}
            for rid in out.token_request_ids:
                emitted[rid] = emitted.get(rid, 0) + 1
            if emitted:
                self._zero[w] = 0
            first, later = [], []
            for rid, count in emitted.items():
                req = requests[rid]
                if not req.times:
                    self.state.prefill_done(rid)
                    self.queued -= 1
                    first.append(req)
                else:
                    later.append(req)
                req.times.extend([now] * count)
                req.steps.append(len(req.times))
                self.observer.tokens(req, count, now)
            # First tokens go out first: up to WAKE_BATCH at once, once the pass is complete
            # (below), before the next pass starts; the rest from the next loop iterations.
            firsts.extend(first[:WAKE_BATCH])
            self._to_wake.extend(first[WAKE_BATCH:])
            self._to_wake.extend(later)
            for rid in out.rejected:
                requests[rid].rejected = True
            for rid in out.completed:
                self._zero[w] = 0
                req = requests[rid]
                req.done_ms = now  # ended: its first chunk, if any, says so (_terminal below)
                ended.append(req)
            if eff.kv_events:
                self._zero[w] = 0
            self._kv(w, now, eff.kv_events)
            if eff.forward_pass_metrics is not None:
                for sink in self.fpm_sinks:
                    _publish(sink, w, now, eff.forward_pass_metrics)
            self.observer.pass_completed(w, rc.dp_rank, eff.metrics, eff.forward_pass_metrics)
        for req in firsts:
            req.notify()
        # Then the ended requests: their last messages (written at once by their streams'
        # push) and the bookkeeping of their ends.
        for req in ended:
            self._terminal(req, now)
        self.observer.flush()
        self._schedule_wakes()

    def _schedule_wakes(self) -> None:
        if self._to_wake and not self._waking:
            self._waking = True
            asyncio.get_running_loop().call_soon(self._wake_some)

    def _wake_some(self) -> None:
        """Wake the next :data:`WAKE_BATCH` streams that have new tokens. Their writes run in
        the event loop's next iteration and the following batch in the one after, so the loop
        polls its sockets between batches: a request that comes in while a pass's chunks go
        out is received (and stamped) within one batch's writes, not after all of them."""
        queue = self._to_wake
        for _ in range(min(WAKE_BATCH, len(queue))):
            queue.popleft().notify()
        if queue:
            asyncio.get_running_loop().call_soon(self._wake_some)
        else:
            self._waking = False

    def _terminal(self, req: LiveRequest, now: float) -> None:
        if not req.cancelled:
            req.done_ms = now
        self.state.finish(req.rid)
        self._ended(req)

    def _ended(self, req: LiveRequest) -> None:
        """``req`` ended (its record says how): the counts, the observer and its stream."""
        if not req.times:
            self.queued -= 1
        self.in_flight -= 1
        self.observer.finished(req)
        req.notify()
        if req.push is not None:
            # A stream whose push() completed the response: its task only has to return,
            # woken with the others, WAKE_BATCH per loop iteration (no client waits for it).
            self._to_wake.append(req)
            self._schedule_wakes()

    def _kv(self, w: int, now: float, events: Sequence[KvEvent]) -> None:
        if not events:
            return
        if self.router.wants_kv_events:
            self.router.on_kv_events(w, events)
        for sink in self.kv_sinks:
            _publish(sink, w, now, events)

    # -- accounting ---------------------------------------------------------------------

    def blocks_in_use(self) -> int:
        """Blocks held by running requests, over every rank (0 once everything has ended)."""
        total = 0
        for engine in self.engines:
            for rank in engine.ranks:
                m = rank.metrics() if hasattr(rank, "metrics") else None
                total += m.active_blocks if m is not None else 0
        return total


def _publish(sink: KvEventSink | FpmSink, w: int, now: float, payload: Any) -> None:
    """A sink's failure, whatever it raised, is a SinkError naming the sink (as in replay)."""
    try:
        sink.publish(w, now, payload)
    except Exception as exc:
        raise SinkError(f"sink {type(sink).__name__} failed at {now} ms: {exc}") from exc
