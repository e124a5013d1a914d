"""Lifecycle, planner and faults in a prefill/decode split: :class:`ElasticSplitReplayer`.

It is the split's replayer (servesim.replay.disagg) with the aggregated elastic replay's
lifecycle, planner and faults (servesim.replay.elastic) over two pools, ``prefill`` (pool 0)
and ``decode`` (pool 1). Each pool's router sees its ready workers only (one
:class:`~servesim.replay.ready_router.ReadyRouter` per pool); a request that finds no ready
worker in the pool it needs waits for one (an arrival for a prefill worker, a held source for
a decode worker). Added workers take the next ids, whatever their pool.

A worker that fails under its requests (a crash, an ``immediate`` removal) loses those whose
KV it holds: on a prefill worker the requests whose KV has not reached a decode worker, on a
decode worker every request routed to it. Such a request's handoff is cancelled on the other
side (``CancelSource`` / ``CancelDestination``) and it fails or is sent again from scratch
(``lifecycle.retry``). A request whose KV already left a crashed prefill worker goes on; its
source is simply gone. ``redirect`` hands back a prefill worker's requests not yet admitted
and a decode worker's reservations still pending.

KV-transfer failures (``faults.kv_transfer``) are decided when a transfer would complete: a
failed transfer is tried again (another full transfer time) up to ``max_retries`` times; then
with ``fallback: local_prefill`` the decode worker computes the prompt itself: it starts no
pass for the timing model's price of that prefill (the prompt tokens its reservation lacked,
after the cached prefix; times its warm-up and slow factors) and then activates the
destination as if the KV had arrived; with ``fallback: fail`` the request is lost as above.
The local prefill is modelled as a pass of its own (not chunked into the worker's decode
passes), its source held until the activation, as after a transfer.

Runs of passes are off, as in the aggregated elastic replay: a lifecycle event may fall
between any two passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.config.elastic import LifecycleConfig, TransferFallback
from servesim.contract import CancelDestination, CancelSource
from servesim.engine import Engine
from servesim.errors import ReplayError
from servesim.replay.disagg import DecodeLoadRouter, DisaggReplayer
from servesim.replay.driver import EXTERNAL
from servesim.replay.elastic import ElasticReplayer
from servesim.replay.faults import FaultPlan
from servesim.replay.lifecycle import ACTIVE, PoolRuntime, WorkerState
from servesim.replay.planning import Planner
from servesim.replay.ready_router import ReadyRouter

LOCAL_DONE = -10  # EXTERNAL code: a decode worker's local prefill ends (second: worker, epoch)
PREFILL, DECODE = 0, 1  # pool indices
SERVING = (WorkerState.READY, WorkerState.WARMUP)


class ElasticSplitReplayer(ElasticReplayer, DisaggReplayer):
    """A prefill/decode split whose pools grow, shrink and fail (see the module docs)."""

    def __init__(
        self,
        prefill_engines: Sequence[Engine],
        decode_engines: Sequence[Engine],
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
        DisaggReplayer.__init__(self, prefill_engines, decode_engines, workload, **kwargs)
        self.wait_prefill: list[int] = []  # requests waiting for a ready prefill worker
        self.wait_decode: list[int] = []  # ... for a ready decode worker
        self.sources_lost: set[int] = set()  # KV left a prefill worker that crashed since
        self.transfer_end: dict[int, float] = {}  # the live transfer's end, per request
        self.transfer_tries: dict[int, int] = {}  # transfers so far, over all attempts
        self.transfer_failed: dict[int, int] = {}  # failed tries of the current handoff
        self.missing: dict[int, int] = {}  # prompt tokens the reservation lacked
        self.local_queue: dict[int, list[int]] = {}  # decode worker -> local prefills due
        self.local_busy: dict[int, int] = {}  # decode worker -> the request it prefills
        self.local_rids: set[int] = set()
        self.init_elastic(pools, lifecycle, planner, planner_interval_s, faults)
        self.decode_base = 0  # the decode router names real worker ids

    # -- routers ---------------------------------------------------------------------

    def wrap_routers(self) -> None:
        p, n = self.num_prefill, len(self.engines)
        self.prefill_ready = ReadyRouter(self.prefill_router, range(p))
        self.prefill_ready.prefilled = self.source_held
        self.decode_ready = ReadyRouter(self.decode_router, range(p, n))
        self.decode_ready.prefilled = self.has_first_token
        self.decode_ready.prepare = self.prepare_decode_router
        self.ready_router = self.router = self.prefill_router = self.prefill_ready
        self.decode_router = self.decode_ready
        self.prefill_state = self.prefill_ready.state
        self.state = self.decode_ready.state

    def source_held(self, rid: int) -> bool:
        return self.times["source_held_ms"][rid] >= 0.0

    def prepare_decode_router(self, inner: Any) -> None:
        if DecodeLoadRouter in type(inner).__mro__:
            inner.input_length = self.log.input_length
            inner.ntok = self.log.ntok

    def forget_decode(self, rid: int) -> None:
        self.decode_ready.forget(rid)
        inner: Any = self.decode_ready.inner
        if DecodeLoadRouter in type(inner).__mro__:  # by MRO: see servesim.sinks.base.declares
            inner.finished(rid)

    def update_ready(self, now: float) -> None:
        routable = [r.worker for r in self.records if r.state in SERVING]
        roles = self.is_prefill
        self.prefill_ready.set_ready([w for w in routable if roles[w]])
        self.decode_ready.set_ready([w for w in routable if not roles[w]])
        self.prefill_state = self.prefill_ready.state
        self.state = self.decode_ready.state
        if self.wait_decode and self.decode_ready.ready:
            waiting, self.wait_decode = self.wait_decode, []
            for rid in waiting:
                self._reserve(rid, now)
        if self.wait_prefill and self.prefill_ready.ready:
            waiting, self.wait_prefill = self.wait_prefill, []
            for rid in waiting:
                self._submit_prefill(rid, now)

    # -- what differs from an aggregated cluster -------------------------------------

    def can_route(self) -> bool:
        return True  # a request waits in the pool that has no ready worker

    def held_for(self, pool: int) -> int:
        return len(self.wait_prefill if pool == PREFILL else self.wait_decode)

    def waiting_count(self) -> int:
        return len(self.wait_prefill) + len(self.wait_decode)

    def router_of_pool(self, pool: int) -> ReadyRouter:
        return self.prefill_ready if pool == PREFILL else self.decode_ready

    def request_in_pool(self, rid: int, pool: int) -> bool:
        return True  # every request passes through both pools

    def load_by_worker(self) -> dict[int, int]:
        load: dict[int, int] = {}
        for router in (self.prefill_ready, self.decode_ready):
            for w, *_rest in router.routed_to.values():
                load[w] = load.get(w, 0) + 1
        return load

    def kv_router_for(self, w: int) -> Any:
        router = self.prefill_ready if self.is_prefill[w] else self.decode_ready
        return router if router.wants_kv_events else None

    def requests_on(self, w: int) -> list[int]:
        """The requests whose KV worker ``w`` holds (or will), in routing order."""
        if self.is_prefill[w]:
            act = self.times["destination_activated_ms"]
            return [rid for rid, (ww, *_r) in self.prefill_ready.routed_to.items()
                    if ww == w and act[rid] < 0.0 and rid not in self.local_rids]
        return [rid for rid, (ww, *_r) in self.decode_ready.routed_to.items() if ww == w]

    def stalled(self) -> bool:
        return not all(any(r.state in ACTIVE and self.is_prefill[r.worker] == pf
                           for r in self.records) for pf in (True, False))

    def _check_drained(self) -> None:
        if self.wait_prefill or self.wait_decode:
            raise ReplayError(
                f"simulation stalled at {self.now} ms: {len(self.wait_prefill)} requests wait "
                f"for a prefill worker, {len(self.wait_decode)} for a decode worker")
        super()._check_drained()

    def add_worker(self, pool: int, now: float, reason: str) -> int:
        self.is_prefill.append(pool == PREFILL)
        self.busy_ms.append(0.0)
        self._run_members.append(None)
        return super().add_worker(pool, now, reason)

    # -- requests --------------------------------------------------------------------

    def _submit_prefill(self, rid: int, now: float) -> None:
        if not self.prefill_ready.ready:
            self.wait_prefill.append(rid)
            return
        super()._submit_prefill(rid, now)

    def _reserve(self, rid: int, now: float) -> None:
        if not self.decode_ready.ready:
            self.wait_decode.append(rid)
            return
        super()._reserve(rid, now)

    def finish_request(self, rid: int, now: float) -> None:
        self.forget_decode(rid)
        super().finish_request(rid, now)

    def _release(self, rid: int, now: float) -> None:
        if rid in self.sources_lost:  # its prefill worker crashed after the KV left it
            self.sources_lost.discard(rid)
            return
        super()._release(rid, now)
        self.prefill_ready.forget(rid)
        self.stop_if_draining(self.prefill_worker[rid], now)

    def _activate(self, rid: int, now: float) -> None:
        super()._activate(rid, now)
        pw = self.prefill_worker[rid]
        if pw in self.dead:  # its source went with its prefill worker: nothing to release
            waiting = self._deferred.get(pw)
            if waiting is not None and rid in waiting:
                waiting.remove(rid)
                if not waiting:
                    del self._deferred[pw]
            self.sources_lost.discard(rid)

    def stop_if_draining(self, w: int, now: float) -> None:
        if w >= 0 and w not in self.dead and self.records[w].state is WorkerState.DRAINING:
            self.stop_if_drained(w, now)

    def lose(self, rid: int, now: float) -> None:
        self.detach(rid, now)
        super().lose(rid, now)

    def detach(self, rid: int, now: float) -> None:
        """Take request ``rid`` out of the split: its handoff cancelled on the workers still
        holding it, its waits, transfers and local prefill dropped, its routing forgotten."""
        for waiting in (self.wait_prefill, self.wait_decode, *self._deferred.values()):
            while rid in waiting:
                waiting.remove(rid)
        for table in (self.transfer_end, self.transfer_failed, self.missing, self._timing,
                      self._transferable):
            table.pop(rid, None)
        if rid in self.local_rids:
            self.local_rids.discard(rid)
            for w, queue in list(self.local_queue.items()):
                if rid in queue:
                    queue.remove(rid)
                    if not queue:
                        del self.local_queue[w]
            for w, busy in list(self.local_busy.items()):
                if busy == rid:
                    del self.local_busy[w]
                    self.dirty.add(w)
        released = self.times["source_released_ms"][rid] >= 0.0 or rid in self.sources_lost
        self.sources_lost.discard(rid)
        hid = self._hid[rid]
        pw, dw = self.prefill_worker[rid], self.decode_worker[rid]
        sides = []
        if pw >= 0 and not released:
            sides.append((pw, self.prefill_dp[rid], CancelSource(hid)))
        if dw >= 0:
            sides.append((dw, self.decode_dp[rid], CancelDestination(hid)))
        for w, dp, command in sides:
            if w in self.dead:
                continue
            self.internal_work_due(w, now)
            effects = self.engines[w].apply(dp, command, now)
            self.dirty.add(w)
            if effects.kv_events:
                self.publish_kv(w, now, effects.kv_events)
            if effects.lifecycle_events:  # a freed destination woke the FIFO
                self.apply_lifecycle(w, dp, effects.lifecycle_events, now)
        self.prefill_ready.forget(rid)
        self.forget_decode(rid)
        self.prefill_worker[rid] = self.decode_worker[rid] = -1
        for column in self.times.values():
            column[rid] = -1.0
        self.transfer_ms[rid] = -1.0
        for w in (pw, dw):
            self.stop_if_draining(w, now)

    def abort_requests(self, w: int, now: float) -> None:
        self.discard_engine(w)
        for rid in self.requests_on(w):
            self.lose(rid, now)

    def redirect(self, w: int, now: float) -> None:
        """Hand back a prefill worker's requests not yet admitted, or a decode worker's
        reservations still pending, to their pool's router."""
        engine = self.engines[w]
        self.internal_work_due(w, now)
        prefill = self.is_prefill[w]
        since = self.times["prefill_admit_ms" if prefill else "destination_reserved_ms"]
        for rid in self.requests_on(w):
            if since[rid] >= 0.0:
                continue
            hid = self._hid[rid]
            dp = self.prefill_dp[rid] if prefill else self.decode_dp[rid]
            effects = engine.apply(dp, CancelSource(hid) if prefill else CancelDestination(hid), now)
            if rid not in effects.retired_requests:
                continue
            if effects.kv_events:
                self.publish_kv(w, now, effects.kv_events)
            if effects.lifecycle_events:
                self.apply_lifecycle(w, dp, effects.lifecycle_events, now)
            self.redirected += 1
            if prefill:
                self.prefill_ready.forget(rid)
                self.prefill_worker[rid] = -1
                self._submit_prefill(rid, now)
            else:
                self.forget_decode(rid)
                self.decode_worker[rid] = -1
                self._reserve(rid, now)

    def discard_engine(self, w: int) -> None:
        super().discard_engine(w)
        self._deferred.pop(w, None)
        self.local_queue.pop(w, None)
        self.local_busy.pop(w, None)
        if not self.is_prefill[w]:
            return
        # Requests whose KV left this prefill worker (or that prefill on their decode worker)
        # go on without their source.
        act = self.times["destination_activated_ms"]
        for rid, (ww, *_r) in list(self.prefill_ready.routed_to.items()):
            if ww == w and (act[rid] >= 0.0 or rid in self.local_rids):
                self.prefill_ready.forget(rid)
                if act[rid] < 0.0:
                    self.sources_lost.add(rid)

    # -- KV transfers ----------------------------------------------------------------

    def _start_transfer(self, rid: int, now: float) -> None:
        self.missing[rid] = self._transferable.get(rid, 0)
        super()._start_transfer(rid, now)
        self.transfer_end[rid] = now + self.transfer_ms[rid]

    def _external(self, a: int, b: int, now: float) -> None:
        if a == LOCAL_DONE:
            if self.unfinished():
                self.local_done(b >> 16, b & 0xFFFF, now)
        elif a >= 0 and b == 0:
            if self.unfinished():
                self.transfer_done(a, now)
        else:
            super()._external(a, b, now)

    def transfer_done(self, rid: int, now: float) -> None:
        if self.transfer_end.get(rid) != now:
            return  # the transfer of a request lost since
        del self.transfer_end[rid]
        plan = self.faults
        if plan is not None and plan.transfer is not None:
            tries = self.transfer_tries.get(rid, 0)
            self.transfer_tries[rid] = tries + 1
            if plan.transfer_fails(rid, tries):
                self.transfer_failure(rid, now)
                return
        super(ElasticReplayer, self)._external(rid, 0, now)  # the split's activation

    def transfer_failure(self, rid: int, now: float) -> None:
        """Request ``rid``'s transfer failed: try again, prefill locally, or lose it."""
        plan = self.faults
        assert plan is not None and plan.transfer is not None
        counts = plan.counts
        counts["kv_transfer_failures"] += 1
        failed = self.transfer_failed[rid] = self.transfer_failed.get(rid, 0) + 1
        if failed <= plan.transfer.max_retries:
            counts["kv_transfer_retries"] += 1
            end = now + self.transfer_ms[rid]
            self.transfer_end[rid] = end
            self.push_event(end, EXTERNAL, rid, 0)
        elif plan.transfer.fallback is TransferFallback.LOCAL_PREFILL:
            counts["local_prefills"] += 1
            w = self.decode_worker[rid]
            self.local_rids.add(rid)
            self.local_queue.setdefault(w, []).append(rid)
            if w not in self.local_busy and not self.engines[w].pass_in_flight:
                self.start_local(w, now)
        else:
            counts["kv_transfer_lost"] += 1
            self.lose(rid, now)

    # -- local prefills on a decode worker -------------------------------------------

    def local_prefill_ms(self, rid: int, w: int) -> float:
        """The timing model's price of prefilling what ``rid``'s reservation lacked."""
        factory: Any = self.pools[self.records[w].pool].factory
        isl = self.log.input_length[rid]
        prefix = max(isl - self.missing.get(rid, isl), 0)
        if isl <= prefix:
            return 0.0
        assert self.pass_scale is not None
        return float(factory.lone_prefill_ms(isl, prefix)) * self.pass_scale[w]

    def start_local(self, w: int, now: float) -> None:
        queue = self.local_queue[w]
        rid = queue.pop(0)
        if not queue:
            del self.local_queue[w]
        ms = self.local_prefill_ms(rid, w)
        self.local_busy[w] = rid
        self.pass_busy_ms[w] += ms
        self.busy_ms[w] += ms
        self.push_worker_event(now + ms, LOCAL_DONE, w)

    def local_done(self, w: int, epoch: int, now: float) -> None:
        if self.records[w].epoch & 0xFFFF != epoch or w not in self.local_busy:
            return
        rid = self.local_busy.pop(w)
        self.local_rids.discard(rid)
        self.dirty.add(w)
        self._activate(rid, now)
        if w in self.local_queue:
            self.start_local(w, now)

    # -- the driver's per-worker steps -----------------------------------------------

    def _complete(self, w: int, pass_id: int, now: float) -> None:
        super()._complete(w, pass_id, now)
        if w in self.local_queue and w not in self.local_busy and w not in self.dead:
            self.start_local(w, now)

    def _start_passes(self, now: float) -> None:
        if self.local_busy:
            self.dirty.difference_update(self.local_busy)
        super()._start_passes(now)
