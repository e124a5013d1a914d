"""Disaggregated replay: prefill workers hand each request's prompt KV to decode workers.

:class:`DisaggReplayer` extends the aggregated :class:`~servesim.replay.driver.Replayer`
(arrivals, sessions, passes and statistics are the same) with the handoff lifecycle of
aisimulate-engine.md §8.2, one handoff per request (``HandoffId(request_id)``):

1. an arrival is routed to a prefill worker by ``cluster.router`` (with ``kv``: prefix
   overlap from the prefill workers' KV events) and sent as ``SubmitHandoffPrefill`` with one
   output token — the prefill forward samples it, and a prefill worker spends no decode time
   (dynamo-mocker.md §2.5, §7.2);
2. at that pass's completion the source publishes ``SourceHeld``; the driver picks a decode
   worker by load (:class:`DecodeLoadRouter`) and sends ``ReserveDestination``;
3. on ``DestinationReserved`` (in the command's effects, or at a later pass boundary when
   the reservation waited) the transfer is scheduled at ``now + delay``, ``delay`` being
   ``transfer_timing.delay_ms(transferable_prompt_tokens)`` or, when the engine gives no
   timing, ``cluster.handoff_latency_ms``;
4. when the transfer completes, ``ActivateDestination`` goes to the decode worker — deferred
   to the end of its pass if it is mid-pass — and then ``ReleaseSource`` to the prefill
   worker, likewise deferred while that worker is mid-pass (the reference's
   ``worker_is_busy`` check; its per-request ``source_released_ms`` shows the same deferral).

A decode backend whose ranks set ``reserve_destination_first`` (SGLang) reverses steps 1-3:
the destination is reserved at arrival, the prefill is submitted once it is reserved, and the
transfer starts when the source is held.

The client's tokens are the decode worker's: the prefill worker's sampled token is not
reported, so TTFT runs from arrival to the decode side's first token, as in the reference's
disaggregated report (its ``first_token_ms`` follows ``destination_activated_ms`` by one
decode pass). A destination that can never fit the decode pool (a recoverable
``CommandRejected``) cancels the source and fails the request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any, cast

from servesim._compiled import mypyc_attr
from servesim.contract import (
    ActivateDestination,
    Admission,
    CancelDestination,
    CancelSource,
    DestinationReserved,
    HandoffId,
    HandoffTransferTiming,
    KvEvent,
    ReleaseSource,
    Request,
    ReserveDestination,
    SourceHeld,
    SubmitHandoffPrefill,
)
from servesim.engine import Engine
from servesim.errors import CommandRejected, ReplayError
from servesim.kv.adapter_hashes import prompt_hashes
from servesim.rank import Handoff
from servesim.replay.adapters import split_lora_report
from servesim.replay.cluster import ClusterState
from servesim.replay.driver import EXTERNAL, Replayer
from servesim.replay.routers import Router
from servesim.sinks.publish import publish
from servesim.workload.model import Workload, mark_unique_prompts

if TYPE_CHECKING:
    import numpy as np

    from servesim.replay.driver import ProgressFn
    from servesim.replay.observers import Observers
    from servesim.replay.speed import SpeedOverlay
    from servesim.replay.timeline import PassTimeline
    from servesim.sinks.base import FpmSink, KvEventSink


class DecodeLoadRouter(Router):
    """The decode pool's router: Dynamo's KV-router cost without prefix overlap.

    Decode workers publish no prefix-cache state worth routing on (the reference's
    ``needs_kv_publisher`` is false for them, dynamo-mocker.md §1.2), so for a request of
    ``isl`` prompt tokens every slot *s* costs

    ``(pending(s) + isl) / block_size + Σ ceil(len(r) / block_size) + ceil(isl / block_size)``

    where the sum runs over the requests routed to *s* and not finished, ``len(r)`` is their
    current length (prompt plus tokens generated so far: Dynamo's router updates active
    decode blocks as tokens are generated) and ``pending(s)`` sums the prompt lengths of
    those that have not yet produced a token. The lowest cost wins; ties go to the first
    slot at or after a rotating pointer (the reference breaks ties at random). On the golden
    two-by-two case the reference's own run-to-run spread covers servesim's mean TTFT and
    E2E (tests/replay/test_disagg_golden.py).
    """

    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        super().__init__(num_workers, dp_size, block_size, config)
        # Per slot: request id -> its prompt length + block_size - 1 (so a member's blocks
        # are (that + tokens produced) // block_size, one addition fewer a member).
        self.members: list[dict[int, int]] = [{} for _ in range(num_workers * dp_size)]
        self._slot_of: dict[int, int] = {}
        self._next = 0
        # Per request: prompt length and tokens produced so far (the replay's log columns).
        self.input_length: Sequence[int] = ()
        self.ntok: Sequence[int] = ()
        # Per slot with a run of passes in flight: (passes of it that ended before the
        # current routing, the run's members); their tokens are not logged yet.
        self.bump: dict[int, tuple[int, Container[int]]] = {}

    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        bs = self.block_size
        up = bs - 1  # ceil(length / bs) == (length + bs - 1) // bs for lengths >= 0
        isl = request.prompt_len
        n = len(self.members)
        ntok, bump = self.ntok, self.bump
        cost = []
        for s, members in enumerate(self.members):
            pending = blocks = 0
            extra = bump.get(s) if bump else None
            if extra is None:
                for rid, base in members.items():
                    produced = ntok[rid]
                    blocks += (base + produced) // bs
                    if not produced:
                        pending += base - up
            else:
                c, in_run = extra
                for rid, base in members.items():
                    produced = ntok[rid]
                    if rid in in_run:
                        produced += c
                    blocks += (base + produced) // bs
                    if not produced:
                        pending += base - up
            cost.append((pending + isl) / bs + blocks)
        start = self._next
        best = min(range(n), key=lambda s: (cost[s], (s - start) % n))
        self._next = (best + 1) % n
        return best // self.dp_size, best % self.dp_size

    def routed(self, request: Request, worker: int, dp_rank: int, state: ClusterState) -> None:
        slot = state.slot(worker, dp_rank)
        rid = request.request_id
        inp = self.input_length  # the log's column, as the costs read it
        self.members[slot][rid] = (inp[rid] if rid < len(inp) else request.prompt_len
                                   ) + self.block_size - 1
        self._slot_of[request.request_id] = slot
        state.add(request.request_id, slot, 0, -(-request.prompt_len // self.block_size))

    def finished(self, request_id: int) -> None:
        slot = self._slot_of.pop(request_id, None)
        if slot is not None:
            self.members[slot].pop(request_id, None)


CANCEL = 1  # EXTERNAL event kind (0: a transfer completed)

_HANDOFF_TIMES = (
    "prefill_admit_ms",
    "source_held_ms",
    "destination_reserved_ms",
    "destination_activated_ms",
    "decode_admit_ms",
    "source_released_ms",
)


@mypyc_attr(allow_interpreted_subclasses=True)  # servesim_serve.disagg_live subclasses it
class DisaggReplayer(Replayer):
    """Replays a workload on a prefill pool and a decode pool (engines ``0..P-1`` are the
    prefill workers, ``P..P+D-1`` the decode workers)."""

    def merges_sinks(self) -> bool:
        return False  # it publishes on its own paths (handoffs): sinks make it step

    def __init__(
        self,
        prefill_engines: Sequence[Engine],
        decode_engines: Sequence[Engine],
        workload: Workload,
        *,
        prefill_router: Router,
        decode_router: Router,
        block_size: int,
        handoff_latency_ms: float = 0.0,
        concurrency: int | None = None,
        arrival_speedup_ratio: float = 1.0,
        kv_sinks: Sequence[KvEventSink] = (),
        fpm_sinks: Sequence[FpmSink] = (),
        record_token_times: bool = False,
        progress: ProgressFn | None = None,
        speed: SpeedOverlay | None = None,
        timeline: PassTimeline | None = None,
        observers: Observers | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        # Replayer's keywords spelled out (no **kwargs: the compiled build cannot describe
        # that signature); a split has no pass log (servesim.replay.runner).
        if not prefill_engines or not decode_engines:
            raise ValueError("a disaggregated replay needs prefill and decode workers")
        super().__init__(
            [*prefill_engines, *decode_engines], workload, router=prefill_router,
            block_size=block_size, concurrency=concurrency,
            arrival_speedup_ratio=arrival_speedup_ratio, kv_sinks=kv_sinks, fpm_sinks=fpm_sinks,
            record_token_times=record_token_times, progress=progress, speed=speed,
            timeline=timeline, observers=observers, max_concurrency=max_concurrency,
        )
        self.num_prefill = len(prefill_engines)
        # Per worker, whether it prefills; the worker id of the decode router's worker 0.
        # (An elastic split adds workers of either pool at the end: servesim.replay.elastic_split.)
        self.is_prefill = [True] * len(prefill_engines) + [False] * len(decode_engines)
        self.decode_base = len(prefill_engines)
        self.prefill_router = prefill_router
        self.decode_router = decode_router
        self.prefill_state = ClusterState(len(prefill_engines), prefill_engines[0].dp_size)
        self.state = ClusterState(len(decode_engines), decode_engines[0].dp_size)
        self.handoff_latency_ms = handoff_latency_ms
        n = len(self.turns)
        self.times: dict[str, list[float]] = {k: [-1.0] * n for k in _HANDOFF_TIMES}
        self.transfer_ms = [-1.0] * n
        self.prefill_worker = [-1] * n
        self.prefill_dp = [0] * n
        self.decode_worker = [-1] * n
        self.decode_dp = [0] * n
        # One handoff identity per request, shared by its commands: 4 constructions become
        # one (the books key their dicts by its value, servesim.mechanics.handoff.HandoffBook).
        self._hid = [HandoffId(i) for i in range(n)]
        self._timing: dict[int, HandoffTransferTiming] = {}
        self._transferable: dict[int, int] = {}
        self.cancelled: set[int] = set()
        # SGLang's disaggregation reserves the decode KV before the prefill starts (the
        # decode side pre-allocates, then the prefill runs); the transfer starts when both
        # ends are ready. The reference's SGLang replay shows it: destination_reserved_ms
        # precedes prefill_admit_ms (golden case sglang_1p1d).
        self.reserve_first = any(
            isinstance(r, Handoff) and r.reserve_destination_first
            for e in decode_engines for r in e.ranks
        )
        self._deferred: dict[int, list[int]] = {}  # worker → request ids awaiting it idle
        self.busy_ms = [0.0] * len(self.engines)
        # Tokens of in-flight run passes that ended before the current routing, per decode
        # slot (set by _run_tokens before the decode router selects; empty otherwise).
        self._bump: dict[int, tuple[int, Container[int]]] = {}
        self._run_members: list[tuple[int, frozenset[int]] | None] = [None] * len(self.engines)
        if DecodeLoadRouter in type(decode_router).__mro__:  # by MRO: see sinks.base.declares
            load_router = cast(DecodeLoadRouter, decode_router)
            load_router.input_length = self.log.input_length
            load_router.ntok = self.log.ntok
            self._bump = load_router.bump
        if self.run_driver is not None:
            self.run_driver.horizon_of = self._run_horizon

    # -- arrivals -------------------------------------------------------------------------

    def _submit(self, rid: int, now: float) -> None:
        self._settle_runs(now)
        log = self.log
        log.arrival[rid] = now
        self._in_flight += 1
        log.max_in_flight = max(log.max_in_flight, self._in_flight)
        if self.reserve_first:
            self._reserve(rid, now)
        else:
            self._submit_prefill(rid, now)

    def _submit_prefill(self, rid: int, now: float) -> None:
        turn = self.turns[rid]
        req = Request(rid, turn.prompt, min(1, turn.output_length), None, turn.priority, turn.lora)
        router = self.prefill_router
        # Elided: as in aggregated replay (Replayer._submit), a block only this request can
        # hold is in no prefill worker's cache before it is routed.
        hashes = ((prompt_hashes(turn.prompt, self.block_size, turn.lora) if turn.lora
                   else turn.prompt.block_hashes_elided(self.block_size)[0])
                  if router.wants_block_hashes else ())
        worker, dp = router.select(req, hashes, self.prefill_state)
        router.routed(req, worker, dp, self.prefill_state)
        self.prefill_worker[rid] = worker
        self.prefill_dp[rid] = dp
        self.dirty.add(worker)
        engine = self.engines[worker]
        if self.has_deadlines and not engine.pass_in_flight:
            d = engine.next_internal_deadline_ms()
            if d is not None and d <= now:
                self._run_internal(worker, now)
        try:
            effects = engine.apply(dp, SubmitHandoffPrefill(self._hid[rid], req), now)
        except CommandRejected:
            self._fail(rid, now)
            return
        if effects.kv_events:
            self.publish_kv(worker, now, effects.kv_events)

    def finish_request(self, rid: int, now: float) -> None:
        if DecodeLoadRouter in type(self.decode_router).__mro__:
            cast(DecodeLoadRouter, self.decode_router).finished(rid)
        super().finish_request(rid, now)

    def _fail(self, rid: int, now: float) -> None:
        """End a request that can never be served (or was cancelled) as failed; a destination
        reserved for it beforehand (reserve-first backends) is given back."""
        w = self.decode_worker[rid]
        if w >= 0 and self.times["destination_activated_ms"][rid] < 0 and rid not in self.cancelled:
            effects = self.engines[w].apply(self.decode_dp[rid], CancelDestination(self._hid[rid]), now)
            self.dirty.add(w)
            if effects.kv_events:
                self.publish_kv(w, now, effects.kv_events)
            if effects.lifecycle_events:
                self.apply_lifecycle(w, self.decode_dp[rid], effects.lifecycle_events, now)
        self.log.rejected[rid] = True
        self.prefill_state.finish(rid)
        self.finish_request(rid, now)

    # -- passes ---------------------------------------------------------------------------

    def note_admissions(self, w: int, admissions: Sequence[Admission], now: float) -> None:
        if self.is_prefill[w]:
            first = self.times["prefill_admit_ms"]
            for adm in admissions:
                if first[adm.request_id] < 0:
                    first[adm.request_id] = now
            super().note_admissions(w, admissions, now)
            return
        # Decode-side admissions of activated requests (by a stepped pass or a run's first
        # pass) reuse nothing from the client's point of view (the reference reports
        # decode_reused_input_tokens separately): only their admission time is kept.
        first = self.times["decode_admit_ms"]
        for adm in admissions:
            if first[adm.request_id] < 0:
                first[adm.request_id] = now

    def _complete(self, w: int, pass_id: int, now: float) -> None:
        engine = self.engines[w]
        run = self.run_driver.in_flight[w] if self.run_driver is not None else None
        if run is not None:
            if (self._lone_end and not self.is_prefill[w] and not self.has_deadlines
                    and w not in self._deferred and self.run_driver is not None
                    and self.run_driver.continue_run(w, now)):
                # The run carries on through this boundary (RunDriver.continue_run): a
                # prefill pass end that reached other decode workers, or none, cut it.
                return
            # Pass by pass, as stepping adds them (the same float sums).
            busy, prev = self.busy_ms[w], run.started_at_ms
            for end in run.pass_ends:
                busy += end - prev
                prev = end
            self.busy_ms[w] = busy
        else:
            started = engine.pending_started_at_ms
            if started is not None:
                self.busy_ms[w] += now - started
        if self.is_prefill[w]:
            self._complete_prefill(w, pass_id, now)
        else:
            super()._complete(w, pass_id, now)
        waiting = self._deferred.pop(w, None)
        if waiting:
            for rid in waiting:
                if self.is_prefill[w]:
                    self._release(rid, now)
                else:
                    self._activate(rid, now)

    def _complete_prefill(self, w: int, pass_id: int, now: float) -> None:
        done = self.engines[w].complete_pass(pass_id, now)
        self.dirty.add(w)
        log = self.log
        busy = self.start_busy[w]
        for rc in done.by_rank:
            eff = rc.effects
            out = eff.outputs
            for rid in out.token_request_ids:
                busy = True
                self.prefill_state.prefill_done(rid)
            if out.cached_tokens:
                log.cached_at_first_token(out.cached_tokens)
            held = {e.request_id for e in eff.lifecycle_events if isinstance(e, SourceHeld)}
            for rid in out.completed:
                busy = True
                if rid not in held:
                    self._fail(rid, now)  # rejected at admission: never handed off
            if self._publish_pass(w, rc.dp_rank, eff, now):
                busy = True
        self._end_pass(w, busy, now)

    # -- runs of passes (servesim.replay.speed.RunDriverView) ----------------------------------------------

    def _run_horizon(self, w: int, now: float, ext: float) -> float:
        """How far a run on decode worker ``w`` may reach (RunDriver.horizon_of).

        Only a handoff reaches a decode worker: a ``ReserveDestination`` sent at a prefill
        pass's end (its ``SourceHeld``), then its transfer and activation. Every prefill pass
        in flight bounds the run. A prefill worker that is idle may start a pass at any later
        event (an arrival, a transfer's release of a source, a cancellation), so then every
        external event bounds it too, and a ready idle one (it starts a pass now) allows no
        run. When every prefill worker is mid-pass, arrivals and transfers up to the first of
        their pass ends reach no decode worker before it (an arrival waits for its prefill
        worker's boundary, a release of a source too; a transfer completes a reservation
        made before the run, and a run needs none reserved), so only internal deadlines
        bound it (a replay with cancellations steps). With sessions or a concurrency limit
        (either kind), any pass end may release work: every other worker's pass bounds the run, as in
        aggregated replay."""
        if w < self.num_prefill:
            return now  # one token per request: a prefill worker never runs
        engines = self.engines
        h = float("inf")
        idle = False
        for p in range(self.num_prefill):
            e = engines[p]
            end = e.pending_end_ms
            if end is None:
                if e.is_ready():
                    return now
                idle = True
            elif end < h:
                h = end
        if idle or self.has_deadlines or self.reserve_first:
            h = min(h, ext)
        runs = self.run_driver
        if runs is not None and runs.cross_worker:
            h = min(h, ext)
            for v in range(self.num_prefill, len(engines)):
                if v == w:
                    continue
                end = engines[v].pending_end_ms
                if end is None:
                    if engines[v].is_ready():
                        return now
                elif end < h:
                    h = end
        return h

    def _settle_runs(self, now: float) -> None:
        """Retire the requests completed by in-flight runs' passes that ended by ``now``."""
        runs = self.run_driver
        if runs is not None and runs.with_done:
            runs.release_done(now)

    def _run_tokens(self, now: float) -> None:
        """The tokens of in-flight run passes that ended before ``now``, for the decode
        router (stepping would have logged them; a pass ending exactly now completes after
        the prefill pass whose end routes, which started earlier)."""
        runs = self.run_driver
        assert runs is not None
        bump = self._bump
        p = self.num_prefill
        for w in range(p, len(self.engines)):
            run = runs.in_flight[w]
            if run is None:
                continue
            c = bisect_left(run.pass_ends, now)
            if c:
                known = self._run_members[w]
                # Keyed by the run's first pass: a run carried on (RunDriver.continue_run)
                # is a new object with the same members.
                if known is None or known[0] != run.first_pass_id:
                    known = self._run_members[w] = (run.first_pass_id, frozenset(run.members))
                bump[w - p] = (c, known[1])  # a running engine has dp_size 1: slot = worker

    # -- the handoff ----------------------------------------------------------------------

    def apply_lifecycle(self, w: int, dp_rank: int, events: Sequence[object], now: float) -> None:
        for ev in events:
            if isinstance(ev, SourceHeld):
                self._source_held(ev, now)
            elif isinstance(ev, DestinationReserved):
                self._reserved(ev, now)
            else:
                raise ReplayError(f"worker {w}: unexpected lifecycle event {ev!r}")

    def _source_held(self, ev: SourceHeld, now: float) -> None:
        rid = ev.request_id
        self.times["source_held_ms"][rid] = now
        self._timing[rid] = ev.transfer_timing
        if self.reserve_first:
            self._start_transfer(rid, now)  # the destination was reserved before the prefill
        else:
            self._reserve(rid, now)

    def _reserve(self, rid: int, now: float) -> None:
        turn = self.turns[rid]
        req = Request(rid, turn.prompt, turn.output_length, None, turn.priority, turn.lora)
        router = self.decode_router
        if self.run_driver is not None and self.run_driver.count:
            self._settle_runs(now)
            self._run_tokens(now)
        local, dp = router.select(req, (), self.state)
        if self._bump:
            self._bump.clear()
        router.routed(req, local, dp, self.state)
        w = self.decode_base + local
        self.decode_worker[rid] = w
        self.decode_dp[rid] = dp
        self.log.worker[rid] = w
        self.log.dp_rank[rid] = dp
        self.dirty.add(w)
        try:
            effects = self.engines[w].apply(dp, ReserveDestination(self._hid[rid], req), now)
        except CommandRejected:
            # The prompt can never fit the decode pool: give the source back, fail the request.
            pw = self.prefill_worker[rid]
            if pw >= 0:
                self.engines[pw].apply(self.prefill_dp[rid], CancelSource(self._hid[rid]), now)
                self.dirty.add(pw)
            self._fail(rid, now)
            return
        if effects.kv_events:
            self.publish_kv(w, now, effects.kv_events)
        if effects.lifecycle_events:
            self.apply_lifecycle(w, dp, effects.lifecycle_events, now)

    def _reserved(self, ev: DestinationReserved, now: float) -> None:
        rid = ev.request_id
        self.times["destination_reserved_ms"][rid] = now
        self._transferable[rid] = ev.transferable_prompt_tokens
        if self.reserve_first:
            self._submit_prefill(rid, now)
        else:
            self._start_transfer(rid, now)

    def _start_transfer(self, rid: int, now: float) -> None:
        """Both ends are ready: the transfer completes ``delay`` ms from now."""
        timing = self._timing.pop(rid, None)
        tokens = self._transferable.pop(rid, 0)
        delay = timing.delay_ms(tokens) if timing is not None else None
        if delay is None:
            delay = self.handoff_latency_ms
        self.transfer_ms[rid] = delay
        self.push_event(now + delay, EXTERNAL, rid, 0)

    def cancel_at(self, rid: int, at_ms: float) -> None:
        """Cancel request ``rid`` at ``at_ms`` (before :meth:`run`), wherever it is then."""
        # A cancellation mid-run would need the run's earlier passes' tokens logged before
        # it: step the replay through instead.
        self.run_driver = None
        self.push_event(at_ms, EXTERNAL, rid, CANCEL)

    def _external(self, rid: int, kind: int, now: float) -> None:
        """A transfer completed (activate on the decode worker), or a cancellation is due."""
        if kind == CANCEL:
            self._settle_runs(now)
            self._cancel(rid, now)
            return
        if rid in self.cancelled:
            return
        w = self.decode_worker[rid]
        if self.engines[w].pass_in_flight:
            self._deferred.setdefault(w, []).append(rid)
        else:
            self._activate(rid, now)

    def _cancel(self, rid: int, now: float) -> None:
        """Cancel a request mid-handoff (aisimulate-engine.md §8.2 step 7): ``CancelSource`` to
        its prefill worker and ``CancelDestination`` to its decode worker free both sides and
        drop any retained output; the request ends (counted as failed) only if a side reports
        it retired — a request whose last token is already in flight completes normally."""
        log = self.log
        if log.arrival[rid] < 0 or log.done[rid] >= 0 or rid in self.cancelled:
            return
        retired = False
        for w, dp, command in (
            (self.prefill_worker[rid], self.prefill_dp[rid], CancelSource(self._hid[rid])),
            (self.decode_worker[rid], self.decode_dp[rid], CancelDestination(self._hid[rid])),
        ):
            if w < 0:
                continue
            effects = self.engines[w].apply(dp, command, now)
            retired = retired or rid in effects.retired_requests
            self.dirty.add(w)
            if effects.kv_events:
                self.publish_kv(w, now, effects.kv_events)
            if effects.lifecycle_events:  # a freed destination woke the FIFO
                self.apply_lifecycle(w, dp, effects.lifecycle_events, now)
        if not retired:
            return
        self.cancelled.add(rid)
        for waiting in self._deferred.values():
            while rid in waiting:
                waiting.remove(rid)
        self._fail(rid, now)

    def _activate(self, rid: int, now: float) -> None:
        w = self.decode_worker[rid]
        effects = self.engines[w].apply(self.decode_dp[rid], ActivateDestination(self._hid[rid]), now)
        self.times["destination_activated_ms"][rid] = now
        self.dirty.add(w)
        if effects.kv_events:
            self.publish_kv(w, now, effects.kv_events)
        if effects.lifecycle_events:  # the activation woke the pending-destination FIFO
            self.apply_lifecycle(w, self.decode_dp[rid], effects.lifecycle_events, now)
        pw = self.prefill_worker[rid]
        if self.engines[pw].pass_in_flight:
            self._deferred.setdefault(pw, []).append(rid)
        else:
            self._release(rid, now)

    def _release(self, rid: int, now: float) -> None:
        w = self.prefill_worker[rid]
        effects = self.engines[w].apply(self.prefill_dp[rid], ReleaseSource(self._hid[rid]), now)
        self.times["source_released_ms"][rid] = now
        self.prefill_state.finish(rid)
        self.dirty.add(w)
        if effects.kv_events:
            self.publish_kv(w, now, effects.kv_events)
        if effects.lifecycle_events:
            self.apply_lifecycle(w, self.prefill_dp[rid], effects.lifecycle_events, now)

    def publish_kv(self, w: int, now: float, events: Sequence[KvEvent], start: float | None = None) -> None:
        """KV events feed the router of the worker's pool (prefill overlap routing)."""
        if self.is_prefill[w]:
            if self.prefill_router.wants_kv_events:
                self.prefill_router.on_kv_events(w, events)
        elif self.decode_router.wants_kv_events:
            self.decode_router.on_kv_events(w - self.decode_base, events)
        for sink in self.kv_sinks:
            publish(sink, w, now, events)

    # -- report ---------------------------------------------------------------------------

    def report_extras(self) -> dict[str, Any]:
        """Disaggregation keys of the report (docs/report.md)."""
        import numpy as np  # here, not at import: the replay itself needs none

        log = self.log
        mask = log.completed_mask()
        arrival = np.asarray(log.arrival)
        first = np.asarray(log.first)
        held = np.asarray(self.times["source_held_ms"])
        active = np.asarray(self.times["destination_activated_ms"])
        got = mask & (first >= 0) & (active >= 0)
        transfers = np.asarray(self.transfer_ms)
        handed = active >= 0
        duration = float(np.asarray(log.done)[mask].max()) if mask.any() else 0.0
        roles = self.is_prefill

        def mean(x: np.ndarray) -> float:
            return float(x.mean()) if len(x) else 0.0

        def util(busy: list[float]) -> float:
            return sum(busy) / (len(busy) * duration) if duration > 0 else 0.0

        return {
            "num_cancelled": len(self.cancelled),
            "num_handoffs": int(handed.sum()),
            "mean_kv_transfer_ms": mean(transfers[handed]),
            "mean_ttft_prefill_ms": mean((held - arrival)[got]),
            "mean_ttft_transfer_ms": mean((active - held)[got]),
            "mean_ttft_decode_ms": mean((first - active)[got]),
            "worker_utilization": {
                "prefill": util([b for b, pf in zip(self.busy_ms, roles, strict=True) if pf]),
                "decode": util([b for b, pf in zip(self.busy_ms, roles, strict=True) if not pf]),
            },
            **split_lora_report(self.engines, roles),
        }

    def per_request_extras(self) -> dict[str, list[Any]]:
        """Per-request handoff fields for the per-request JSONL."""
        out: dict[str, list[Any]] = {k: v for k, v in self.times.items()}
        out["kv_transfer_ms"] = self.transfer_ms
        out["prefill_worker"] = self.prefill_worker
        out["prefill_dp_rank"] = self.prefill_dp
        return out




def build_disagg_replayer(
    loaded: Any, workload: Workload, kv_sinks: list[Any], fpm_sinks: list[Any],
    record_metrics: bool = True, replayer_class: type[DisaggReplayer] | None = None,
    emit_fpm: bool = False, speed: SpeedOverlay | None = None, **kwargs: Any
) -> DisaggReplayer:
    """The prefill and decode pools of ``loaded`` (``cluster.prefill_workers`` /
    ``decode_workers``, each role's engine = ``engine:`` merged with ``cluster.prefill_engine``
    / ``decode_engine`` and its ``worker_type`` forced), their routers and the replayer.

    The aggregated replay's savings apply: trace-unique prompt blocks are marked (the
    prefill router, prefill ranks whose hashes only the router reads, and decode ranks whose
    hashes nothing outside them reads may elide them), a prefill pool whose KV events only the router reads
    is told so (``EventReaders.kv_router_only``), and ``record_metrics=False`` (the
    runner's choice without a timeline) leaves the unread occupancy snapshots unbuilt.
    ``replayer_class``: a DisaggReplayer subclass to build instead (the live one of
    ``servesim_serve.disagg_live``); ``emit_fpm``: forward-pass metrics even without sinks;
    ``speed``: the speed overlay (servesim.replay.speed), which fits the pools' factories and
    the replayer."""
    mark_unique_prompts(workload)
    cluster = loaded.sim.cluster
    emit_fpm = emit_fpm or bool(fpm_sinks) or kwargs.get("timeline") is not None
    pools: list[tuple[Any, list[Engine]]] = []
    for factory, count in split_factories(loaded, kv_sinks, record_metrics, emit_fpm, speed):
        first = 0 if not pools else cluster.prefill_workers
        pools.append((factory, [factory.build(first + i) for i in range(count)]))
    (pf, prefill), (df, decode) = pools
    block_size = pf.config.bs
    router_class = loaded.plugins.routers().get(cluster.router)
    prefill_router = router_class(len(prefill), pf.config.dp_size, block_size, loaded.router_config)
    decode_router = DecodeLoadRouter(len(decode), df.config.dp_size, df.config.bs)
    return (replayer_class or DisaggReplayer)(
        prefill, decode, workload, prefill_router=prefill_router, decode_router=decode_router,
        block_size=block_size, handoff_latency_ms=cluster.handoff_latency_ms,
        kv_sinks=kv_sinks, fpm_sinks=fpm_sinks, speed=speed, **kwargs,
    )


def split_factories(
    loaded: Any, kv_sinks: list[Any], record_metrics: bool, emit_fpm: bool,
    speed: SpeedOverlay | None = None,
) -> list[tuple[Any, int]]:
    """The engine factory and initial worker count of the prefill pool, then the decode pool
    (see :func:`build_disagg_replayer`), fitted by ``speed`` when given."""
    cluster = loaded.sim.cluster
    router_class = loaded.plugins.routers().get(cluster.router)
    out = []
    for role, count, overrides in (
        ("prefill", cluster.prefill_workers, cluster.prefill_engine),
        ("decode", cluster.decode_workers, cluster.decode_engine),
    ):
        factory = loaded.engine_factory(
            {**overrides, "worker_type": role},
            emit_kv_events=bool(kv_sinks) or (role == "prefill" and router_class.wants_kv_events),
            emit_forward_pass_metrics=emit_fpm,
            path=f"cluster.{role}_engine",
        )
        factory.fit_to_sinks(kv_sinks)
        if speed is not None:
            speed.fit_factory(
                factory, kv_sinks,
                router_reads_events=role == "prefill" and router_class.wants_kv_events,
                record_metrics=record_metrics)
        out.append((factory, count))
    return out


__all__ = ["DecodeLoadRouter", "DisaggReplayer", "build_disagg_replayer", "split_factories"]
