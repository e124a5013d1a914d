"""The aggregated replay of an elastic, failing cluster: :class:`ElasticReplayer`.

It is the :class:`~servesim.replay.driver.Replayer` with worker lifecycles
(servesim.replay.lifecycle), a planner (servesim.replay.planning) and faults
(servesim.replay.faults). Its own timed events are the driver's ``EXTERNAL`` events, handled
after the passes ending at their time and before the arrivals due then. Runs of passes are
off (every lifecycle event would have to end them), and sinks are written as events happen.

Requests: an arrival with no ready worker waits at the front end (its TTFT counts from its
arrival) until one is ready. A request whose worker fails under it (a crash, or an
``immediate`` removal) fails, or with ``lifecycle.retry`` is sent again from scratch after
``backoff_s``: its tokens so far are dropped from its record, its arrival is kept. So every
submitted request ends completed, failed or rejected, exactly once.

The steps that differ in a prefill/decode split (which router a worker's requests and KV
events belong to, what a failed worker loses, where a request waits) are methods that
:class:`~servesim.replay.elastic_split.ElasticSplitReplayer` overrides.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.config.elastic import DrainPolicy, LifecycleConfig
from servesim.contract import CancelRequest, ClearedBlocks, ForwardPassMetrics, KvEvent
from servesim.engine import Engine
from servesim.errors import ReplayError
from servesim.rank import NO_RETRY_HINT
from servesim.replay.driver import EXTERNAL, PASS_END, Replayer
from servesim.replay.elastic_view import ElasticView
from servesim.replay.faults import FaultPlan, InjectedRejections
from servesim.replay.lifecycle import ACTIVE, PoolRuntime, ScalingLog, WorkerRecord, WorkerState
from servesim.replay.planning import Planner, PlannerDecision
from servesim.replay.ready_router import ReadyRouter
from servesim.sinks.base import WorkerChange, workers_changed
from servesim.sinks.publish import publish

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig

# EXTERNAL event codes (the event's first argument; the second is a worker or request id).
# Negative: a split's own EXTERNAL events (servesim.replay.disagg) have a request id there.
STARTED = -1  # a worker's start-up ended (second: worker; epoch checked)
WARMED = -2  # its warm-up ended
TICK = -3  # a planner tick
CRASH = -4  # a worker crashes
RESTART = -5  # a crashed worker's restart time
SLOW = -6  # a slow window opens or closes (second: worker)
RETRY = -7  # a failed request is sent again
KV_LATE = -8  # a delayed batch of KV events reaches the router (second: its key)

#: Planner ticks with requests waiting, no worker active and nothing else due, before the
#: replay gives up (a planner that never scales up from zero).
MAX_IDLE_TICKS = 1000


class ElasticReplayer(Replayer):
    """A replay whose pools grow, shrink and fail (see the module docs)."""

    def merges_sinks(self) -> bool:
        return False  # events go to the sinks as they happen (no runs to merge around)

    def __init__(
        self,
        engines: Sequence[Engine],
        workload: Any,
        *,
        pools: Sequence[PoolRuntime],
        lifecycle: LifecycleConfig | None = None,
        planner: Planner | None = None,
        planner_interval_s: float = 10.0,
        faults: FaultPlan | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["speed"] = None  # it steps
        super().__init__(engines, workload, **kwargs)
        self.init_elastic(pools, lifecycle, planner, planner_interval_s, faults)

    def init_elastic(self, pools: Sequence[PoolRuntime], lifecycle: LifecycleConfig | None,
                     planner: Planner | None, planner_interval_s: float,
                     faults: FaultPlan | None) -> None:
        """The elastic state over the driver's (a split's replayer calls it too)."""
        self.pools = list(pools)
        self.lifecycle = lifecycle or LifecycleConfig()
        self.planner = planner
        self.interval_ms = planner_interval_s * 1000.0
        self.faults = faults
        self.records: list[WorkerRecord] = []
        pool = 0
        left = self.pools[0].initial
        for w in range(len(self.engines)):
            while left == 0:
                pool += 1
                left = self.pools[pool].initial
            left -= 1
            self.records.append(WorkerRecord(w, pool, WorkerState.READY, 0.0, ready_ms=0.0))
        self.dead: set[int] = set()  # workers whose engine is discarded (stopped or crashed)
        self.scaling = ScalingLog()
        self.wrap_routers()
        self.pass_scale = [1.0] * len(self.engines)
        self.held: list[int] = []  # arrivals waiting for a ready worker, in order
        self.arrived = [-1.0] * len(self.turns)
        self.attempts: dict[int, int] = {}
        self.failed: set[int] = set()
        self.retried = 0
        self.redirected = 0
        self.last_event_id: dict[tuple[int, int], int] = {}
        self.view = ElasticView(self)
        self.idle_ticks = 0

    def wrap_routers(self) -> None:
        """The router sees ready workers only (servesim.replay.ready_router)."""
        self.ready_router = ReadyRouter(self.router, range(len(self.engines)))
        self.ready_router.prefilled = self.has_first_token
        self.router = self.ready_router
        self.state = self.ready_router.state

    # -- what differs between an aggregated cluster and a split -------------------------

    def can_route(self) -> bool:
        """Whether an arrival can be routed now (else the front end holds it)."""
        return bool(self.ready_router.ready)

    def held_for(self, pool: int) -> int:
        """Requests waiting for a ready worker of ``pool`` (the front end's)."""
        return len(self.held)

    def waiting_count(self) -> int:
        """Requests waiting for a ready worker, in every pool."""
        return len(self.held)

    def router_of_pool(self, pool: int) -> ReadyRouter:
        return self.ready_router

    def request_in_pool(self, rid: int, pool: int) -> bool:
        """Whether finished request ``rid`` was served by ``pool``."""
        return self.records[self.log.worker[rid]].pool == pool

    def load_by_worker(self) -> dict[int, int]:
        """Requests routed to each worker and not finished."""
        load: dict[int, int] = {}
        for w, *_rest in self.ready_router.routed_to.values():
            load[w] = load.get(w, 0) + 1
        return load

    def kv_router_for(self, w: int) -> Any:
        """The router that reads worker ``w``'s KV events, or None."""
        return self.router if self.router.wants_kv_events else None

    def abort_requests(self, w: int, now: float) -> None:
        """An ``immediate`` removal: worker ``w``'s requests are cancelled and lost."""
        engine = self.engines[w]
        self.internal_work_due(w, now)
        for rid in self.requests_on(w):
            engine.apply(self.log.dp_rank[rid], CancelRequest(rid, discard_pending_output=True), now)
            self.lose(rid, now)

    # -- the run ---------------------------------------------------------------------

    def run(self) -> Any:
        self.schedule_events()
        return super().run()

    def schedule_events(self) -> None:
        """The planner's first tick and the faults' events (before the first event is handled)."""
        if self.planner is not None:
            self.push_event(0.0, EXTERNAL, TICK, 0)
        if self.faults is not None:
            self.faults.schedule(self)
            if self.faults.rejections is not None:
                self.admission = InjectedRejections(self.faults, self.admission)

    def end_ms(self) -> float:
        """The end of the replay, where workers still serving stop counting GPU-seconds: its
        last request's finish."""
        end = max(self.log.done, default=-1.0)
        return end if end >= 0.0 else self.now

    def _external(self, a: int, b: int, now: float) -> None:
        if not self.unfinished():
            return  # every request has ended: what workers do now changes nothing
        if a >= 0:  # a split's handoff events
            super()._external(a, b, now)
        elif a == STARTED:
            self.started(b >> 16, b & 0xFFFF, now)
        elif a == WARMED:
            self.warmed(b >> 16, b & 0xFFFF, now)
        elif a == TICK:
            self.tick(now)
        elif a == RETRY:
            self._submit(b, now)
        elif self.faults is not None:
            self.faults.event(self, a, b, now)
        else:
            super()._external(a, b, now)

    def push_worker_event(self, at: float, code: int, w: int) -> None:
        """An event for worker ``w``'s current incarnation (its epoch packed in)."""
        self.push_event(at, EXTERNAL, code, (w << 16) | (self.records[w].epoch & 0xFFFF))

    def unfinished(self) -> bool:
        return self._finished < len(self.turns)

    # -- requests --------------------------------------------------------------------

    def has_first_token(self, rid: int) -> bool:
        return self.log.first[rid] >= 0.0

    def _submit(self, rid: int, now: float) -> None:
        if self.arrived[rid] < 0.0:
            self.arrived[rid] = now
            self.view.arrival(rid)
        if not self.can_route():
            self.held.append(rid)
            self.log.arrival[rid] = self.arrived[rid]
            return
        super()._submit(rid, now)
        self.log.arrival[rid] = self.arrived[rid]

    def refuse(self, rid: int, now: float) -> None:
        """A request turned away before routing (an admission policy, an injected rejection)
        has arrived too: it counts as submitted and in the planner's traffic."""
        if self.arrived[rid] < 0.0:
            self.arrived[rid] = now
            self.view.arrival(rid)
        super().refuse(rid, now)

    def finish_request(self, rid: int, now: float) -> None:
        self.ready_router.forget(rid)
        self.view.finished(rid)
        super().finish_request(rid, now)

    def release_held(self, now: float) -> None:
        """Route the requests the front end held, in arrival order."""
        held, self.held = self.held, []
        for rid in held:
            self._submit(rid, now)

    def requests_on(self, w: int) -> list[int]:
        """Requests routed to worker ``w`` and not finished, in routing order."""
        return [rid for rid, (ww, *_rest) in self.ready_router.routed_to.items() if ww == w]

    def lose(self, rid: int, now: float) -> None:
        """A request's worker failed under it: retry it (per ``lifecycle.retry``) or fail it."""
        retry = self.lifecycle.retry
        self.ready_router.forget(rid)
        n = self.attempts.get(rid, 0)
        if n < retry.max_attempts:
            self.attempts[rid] = n + 1
            self.retried += 1
            self.view.restart_request(rid)
            self._in_flight -= 1
            self.push_event(now + retry.backoff_s * 1000.0, EXTERNAL, RETRY, rid)
            return
        self.failed.add(rid)
        self.log.rejected[rid] = True
        self.finish_request(rid, now)

    def redirect(self, w: int, now: float) -> None:
        """Hand worker ``w``'s waiting (not yet admitted) requests back to the router."""
        engine = self.engines[w]
        self.internal_work_due(w, now)
        for rid in self.requests_on(w):
            if self.log.admitted[rid] >= 0.0:
                continue
            dp = self.log.dp_rank[rid]
            eff = engine.apply(dp, CancelRequest(rid), now)
            if rid not in eff.retired_requests:
                continue
            if eff.kv_events:
                self.publish_kv(w, now, eff.kv_events)
            self.ready_router.forget(rid)
            self.redirected += 1
            self._in_flight -= 1
            self._submit(rid, now)

    # -- workers ---------------------------------------------------------------------

    def update_ready(self, now: float) -> None:
        """Give the router the workers now in service (ready, or warming up: a warming-up
        worker takes requests, its passes are slower); release held arrivals."""
        routable = [r.worker for r in self.records
                    if r.state in (WorkerState.READY, WorkerState.WARMUP)]
        self.ready_router.set_ready(routable)
        self.state = self.ready_router.state
        if self.held and self.can_route():
            self.release_held(now)

    def add_worker(self, pool: int, now: float, reason: str) -> int:
        """A new worker of ``pool``, starting now."""
        w = len(self.engines)
        rt = self.pools[pool]
        engine = rt.factory.build(w)  # type: ignore[attr-defined]
        self.engines.append(engine)
        for lst, v in ((self._pass_start, 0.0), (self._deadline_at, None), (self.zero_streak, 0),
                       (self.countdown, None), (self.start_busy, False), (self.last_zero, False),
                       (self._last_retry, NO_RETRY_HINT), (self.pass_busy_ms, 0.0),
                       (self.log_key, None), (self.pass_scale, 1.0)):
            lst.append(v)  # type: ignore[attr-defined]
        self.records.append(WorkerRecord(w, pool, WorkerState.STARTING, now))
        self.scaling.add(now, rt.name, "add", w, reason)
        self.tell_sinks(w, now, "added")
        self.begin_start(w, now)
        return w

    def begin_start(self, w: int, now: float) -> None:
        rec = self.records[w]
        rec.enter(WorkerState.STARTING, now)
        rec.epoch += 1
        self.push_worker_event(now + self.lifecycle.startup_s * 1000.0, STARTED, w)

    def started(self, w: int, epoch: int, now: float) -> None:
        rec = self.records[w]
        if rec.epoch & 0xFFFF != epoch or rec.state is not WorkerState.STARTING:
            return
        rec.ready_ms = now
        warm = self.lifecycle.warmup
        if warm.duration_s > 0 and warm.factor != 1.0:
            rec.enter(WorkerState.WARMUP, now)
            self.push_worker_event(now + warm.duration_s * 1000.0, WARMED, w)
        else:
            rec.enter(WorkerState.READY, now)
        self.rescale(w)
        self.update_ready(now)
        if self.faults is not None:
            self.faults.in_service(self, w, now)

    def warmed(self, w: int, epoch: int, now: float) -> None:
        rec = self.records[w]
        if rec.epoch & 0xFFFF != epoch or rec.state is not WorkerState.WARMUP:
            return
        rec.enter(WorkerState.READY, now)
        self.rescale(w)

    def rescale(self, w: int) -> None:
        """Worker ``w``'s pass-time factor: its warm-up's times any slow window's."""
        rec = self.records[w]
        f = self.lifecycle.warmup.factor if rec.state is WorkerState.WARMUP else 1.0
        if self.faults is not None:
            f *= self.faults.slow_factor(w, self.now)
        assert self.pass_scale is not None
        self.pass_scale[w] = f

    def remove_worker(self, w: int, now: float, reason: str) -> None:
        """Take worker ``w`` out of service per ``lifecycle.drain``."""
        rec = self.records[w]
        pool = self.pools[rec.pool].name
        self.scaling.add(now, pool, "remove", w, reason)
        if rec.state in (WorkerState.STARTING, WorkerState.RESTARTING):
            self.stop(w, now)  # nothing to drain: it never served (or lost all in its crash)
            return
        rec.enter(WorkerState.DRAINING, now)
        self.update_ready(now)
        policy = self.lifecycle.drain
        if policy is DrainPolicy.IMMEDIATE:
            self.abort_requests(w, now)
            self.discard_engine(w)
            self.stop(w, now)
            return
        if policy is DrainPolicy.REDIRECT:
            self.redirect(w, now)
        self.stop_if_drained(w, now)

    def internal_work_due(self, w: int, now: float) -> None:
        """Run worker ``w``'s internal work due by ``now`` (an engine takes no command
        before it)."""
        engine = self.engines[w]
        if not engine.pass_in_flight:
            d = engine.next_internal_deadline_ms()
            if d is not None and d <= now:
                self._run_internal(w, now)

    def stop_if_drained(self, w: int, now: float) -> None:
        rec = self.records[w]
        engine = self.engines[w]
        if rec.state is WorkerState.DRAINING and not engine.pass_in_flight and engine.is_drained():
            self.stop(w, now)

    def stop(self, w: int, now: float) -> None:
        rec = self.records[w]
        rec.enter(WorkerState.STOPPED, now)
        rec.stopped_ms = now
        self.dead.add(w)
        self.clear_cache(w, now)
        self.tell_sinks(w, now, "removed")
        self.update_ready(now)

    def tell_sinks(self, w: int, now: float, change: str) -> None:
        """Tell the sinks that worker ``w`` was added or removed (sinks.base.WorkerChange)."""
        sinks = [*self.kv_sinks, *self.fpm_sinks]
        if sinks:
            rt = self.pools[self.records[w].pool]
            dp_size = rt.factory.config.dp_size  # type: ignore[attr-defined]
            workers_changed(sinks, WorkerChange(w, now, change, rt.name, dp_size))

    def discard_engine(self, w: int) -> None:
        """Drop worker ``w``'s engine: its in-flight pass never completes."""
        self.dead.add(w)
        self.view.forget_worker(w)
        heap = self._heap
        keep = [ev for ev in heap if not (ev[2] == PASS_END and ev[3] == w)]
        if len(keep) != len(heap):
            heap[:] = keep
            heapq.heapify(heap)

    def clear_cache(self, w: int, now: float) -> None:
        """Announce that worker ``w``'s KV cache is gone (AllBlocksCleared per DP rank)."""
        if not (self.kv_sinks or self.ready_router.wants_kv_events):
            return
        events = []
        for dp in range(self.engines[w].dp_size):
            last = self.last_event_id.get((w, dp), -1)
            events.append(KvEvent(last + 1, dp, ClearedBlocks()))
            self.last_event_id[(w, dp)] = last + 1
        self.publish_kv(w, now, events)

    def crash(self, w: int, now: float, restart_ms: float) -> bool:
        """Worker ``w`` crashes now: its requests are lost (retried or failed), its cache is
        cleared, and it restarts with a fresh engine at ``restart_ms``. False when it is not
        serving (starting, restarting, stopped)."""
        rec = self.records[w]
        if rec.state not in (WorkerState.READY, WorkerState.WARMUP, WorkerState.DRAINING):
            return False
        draining = rec.state is WorkerState.DRAINING
        rec.crashes += 1
        rec.enter(WorkerState.RESTARTING, now)
        rec.epoch += 1
        self.discard_engine(w)
        self.update_ready(now)
        for rid in self.requests_on(w):
            self.lose(rid, now)
        self.clear_cache(w, now)
        self.last_event_id = {k: v for k, v in self.last_event_id.items() if k[0] != w}
        if draining:
            self.stop(w, now)
            return True
        self.push_worker_event(restart_ms, RESTART, w)
        return True

    def restart(self, w: int, epoch: int, now: float) -> None:
        rec = self.records[w]
        if rec.epoch & 0xFFFF != epoch or rec.state is not WorkerState.RESTARTING:
            return
        self.engines[w] = self.pools[rec.pool].factory.build(w)  # type: ignore[attr-defined]
        self.dead.discard(w)
        self._deadline_at[w] = None
        self.zero_streak[w] = 0
        self.countdown[w] = None
        self.begin_start(w, now)

    # -- the planner -----------------------------------------------------------------

    def tick(self, now: float) -> None:
        assert self.planner is not None
        snapshot = self.view.snapshot(now)
        decision = self.planner.tick(snapshot)
        if decision is not None:
            self.apply_decision(decision, now)
        if not self.unfinished():
            return
        nxt = decision.next_tick_ms if decision is not None else None
        if nxt is None or nxt <= now:
            nxt = now + self.interval_ms
        if not self.heap_has_work() and self.stalled():
            self.idle_ticks += 1
            if self.idle_ticks > MAX_IDLE_TICKS:
                raise ReplayError(
                    f"the planner left {self.waiting_count()} requests waiting with no worker for "
                    f"{MAX_IDLE_TICKS} ticks (until {now} ms)")
        else:
            self.idle_ticks = 0
        self.push_event(nxt, EXTERNAL, TICK, 0)

    def stalled(self) -> bool:
        """With nothing due but ticks: whether no worker can take the waiting requests."""
        return not any(r.state in ACTIVE for r in self.records)

    def heap_has_work(self) -> bool:
        return any(not (ev[2] == EXTERNAL and ev[3] == TICK) for ev in self._heap) or (
            self.first_next < len(self.first_turns))

    def apply_decision(self, decision: PlannerDecision, now: float) -> None:
        names = {p.name: i for i, p in enumerate(self.pools)}
        reason = decision.reason or "planner"
        for name, target in decision.targets.items():
            if name not in names:
                raise ReplayError(f"the planner named pool {name!r}; pools: {', '.join(names)}")
            self.resize(names[name], int(target), now, reason)
        for act in decision.actions:
            if act.pool not in names:
                raise ReplayError(f"the planner named pool {act.pool!r}; pools: {', '.join(names)}")
            i = names[act.pool]
            self.resize(i, self.active_count(i) + act.delta, now, act.reason or reason)

    def active_count(self, pool: int) -> int:
        return sum(1 for r in self.records if r.pool == pool and r.state in ACTIVE)

    def resize(self, pool: int, target: int, now: float, reason: str) -> None:
        """Add or remove workers of ``pool`` until its active count is ``target`` (clamped
        to ``lifecycle.min_workers``/``max_workers``)."""
        lc = self.lifecycle
        target = max(target, lc.min_workers)
        if lc.max_workers is not None:
            target = min(target, lc.max_workers)
        have = self.active_count(pool)
        for _ in range(target - have):
            self.add_worker(pool, now, reason)
        if target < have:
            for w in self.removal_order(pool)[: have - target]:
                self.remove_worker(w, now, reason)

    def removal_order(self, pool: int) -> list[int]:
        """Which workers go first: those still starting (newest first), then warming up,
        then ready ones with the fewest requests (newest first among equals)."""
        rank = {WorkerState.STARTING: 0, WorkerState.WARMUP: 1, WorkerState.READY: 2}
        load = self.load_by_worker()
        cands = [r for r in self.records if r.pool == pool and r.state in ACTIVE]
        cands.sort(key=lambda r: (rank[r.state], load.get(r.worker, 0), -r.worker))
        return [r.worker for r in cands]

    # -- the driver's per-worker steps, aware of discarded engines ---------------------

    def _complete(self, w: int, pass_id: int, now: float) -> None:
        super()._complete(w, pass_id, now)
        if self.records[w].state is WorkerState.DRAINING:
            self.stop_if_drained(w, now)

    def _start_passes(self, now: float) -> None:
        if self.dead:
            self.dirty.difference_update(self.dead)
        super()._start_passes(now)

    def _internal_work(self, now: float) -> None:
        for w, engine in enumerate(self.engines):
            if w in self.dead or engine.pass_in_flight:
                continue
            d = engine.next_internal_deadline_ms()
            if d is not None and d <= now:
                self._run_internal(w, now)

    def _check_drained(self) -> None:
        stuck = [w for w, e in enumerate(self.engines) if w not in self.dead and not e.is_drained()]
        if stuck or self._finished != len(self.turns) or self.held:
            raise ReplayError(
                f"simulation stalled at {self.now} ms: {len(self.turns) - self._finished} "
                f"requests unfinished ({len(self.held)} waiting for a ready worker), "
                f"workers not drained: {stuck}")

    def publish_kv(self, w: int, now: float, events: Sequence[Any], start: float | None = None) -> None:
        last = self.last_event_id
        for ev in events:
            n = len(getattr(ev, "hashes", ())) if type(ev).__name__ == "RemovedRun" else 1
            last[(w, ev.dp_rank)] = ev.event_id + n - 1
        router = self.kv_router_for(w)
        if router is not None:
            if self.faults is not None and self.faults.kv_view:
                self.faults.route_kv(self, w, now, events)
            else:
                router.on_kv_events(w, events)
        for sink in self.kv_sinks:
            publish(sink, w, now, events)

    def publish_fpm(self, w: int, now: float, start: float, fpm: ForwardPassMetrics,
                    occupancy: Any = None) -> None:
        self.view.pass_metrics(w, fpm, occupancy, now)
        super().publish_fpm(w, now, start, fpm, occupancy)

    # -- the report ------------------------------------------------------------------

    def elastic_report(self, report: ReportConfig | None = None) -> dict[str, Any]:
        """The ``elastic`` section; ``report``'s SLAs judge each interval's attainment."""
        return self.view.report(report)
