"""The Replayer's side of runs of passes (servesim.fast.runs; docs/architecture.md, "Speed by design").

When an idle engine is ready, the driver first offers it a *run* up to its horizon: the time
of the next heap event that could reach that engine. Any arrival can be routed to any worker
and a deadline or external event may concern it, so every non-pass-end event bounds every
run; another worker's pass end matters only when it can release work at its own time (a next
session turn, or a concurrency slot). Events due at a run pass's start were delivered before
the run (the driver only starts passes after the current time's events), so a run is exactly
the passes stepping would have run before that event.

Run effects are consumed in bulk: each member's token count grows by ``k``, its first gap in
the run is its own ITL sample and the ``k - 1`` later gaps are stored once with a weight
(:meth:`servesim.report.stats.RequestLog.run_tokens`). KV events go to the router and sinks
stamped with their own pass end; when a router reads KV state, the events of run passes that
ended by an arrival are released to it (``RunEngine.take_run_kv_events``) before routing, as
stepping would have delivered them. With several workers, sink output is buffered and merged
in one order that does not depend on runs (:mod:`servesim.fast.sink_merge`).

In timestamp mode without sessions or deadlines (several dp_size-1 workers), a run
may also look past arrivals its router *proves* it will send elsewhere
(:class:`~servesim.fast.router_exclusion.ProvesExclusion`: round-robin exactly; the KV
router from bounds on how each slot's cost can move until the arrival, see
:meth:`RunDriver._extend`). Such arrivals are routed while the run is in flight, after its
completions and KV events up to their time were released, exactly as stepping would route
them; an arrival routed to a worker whose run extends past it is an internal error
(:meth:`RunDriver.check_routed`).

Runs continue through completions when no completion can release work (no later session
turn, no concurrency limit): the requests completed before a run's last pass are known when
it starts (``EngineRunStarted.completed_at``) and are retired at their own boundary before any
later arrival is routed (:meth:`RunDriver.release_done`), so routers and ``max_in_flight`` see
exactly stepping's state.

A replayer may carry a run on at its last boundary instead of completing it
(:meth:`RunDriver.continue_run`, ``RunEngine.extend_run``): when nothing else is due then and no
command reached the engine during the run, the passes a new run from that boundary would
commit are appended to it, and the whole run is completed once (disaggregated replay, whose
decode runs end at every prefill pass end, most of which hand nothing to them).

``SERVESIM_RUNS=0`` in the environment (or ``FastOverlay(runs=False)``) forces stepping.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import lshift, or_, sub
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from servesim.errors import ReplayError
from servesim.fast.engine_runs import RunEngine
from servesim.fast.fpm_runs import FpmRun
from servesim.fast.router_exclusion import ProvesExclusion, proves_exclusion
from servesim.fast.runs import EngineRunStarted
from servesim.kv.adapter_hashes import prompt_hashes

if TYPE_CHECKING:
    from servesim.contract import Admission, ForwardPassMetrics, KvEvent, Metrics
    from servesim.replay.cluster import ClusterState
    from servesim.replay.first_turns import FirstTurns
    from servesim.replay.routers import Router
    from servesim.replay.timeline import PassTimeline
    from servesim.sinks.base import FpmSink, KvEventSink
    from servesim.workload.model import TurnSource


class RunHost(Protocol):
    """What a :class:`RunDriver` reads and calls of its replayer
    (:class:`servesim.replay.driver.Replayer` and its subclasses implement it): the cluster,
    the request log and sinks, the per-worker idle bookkeeping it resets when a run starts or
    ends, and the replayer's own steps for events, KV and FPM publishing and finished
    requests, which a run's passes go through exactly as stepped passes do."""

    engines: list[RunEngine]  # built by a factory the overlay fitted (FastOverlay.fit_factory)
    router: Router
    state: ClusterState
    block_size: int
    concurrency: int | None
    turns: TurnSource
    output_length: Sequence[int]
    log: Any  # a RequestLog, or a CohortLog when steady batches log cohorts
    timeline: PassTimeline | None
    kv_sinks: list[KvEventSink]
    fpm_sinks: list[FpmSink]
    sink_merge: Any  # a SinkMerge, a SinkWriterProcess standing in for one, or None
    fpm_by_run: bool
    has_deadlines: bool
    passes: int
    pass_busy_ms: list[float]
    zero_streak: list[int]
    countdown: list[int | None]
    start_busy: list[bool]
    last_zero: list[bool]
    dirty: set[int]
    log_key: list[int | None]
    first_turns: FirstTurns
    first_next: int

    def push_event(self, at: float, kind: int, a: int, b: int = 0) -> None: ...

    def note_admissions(self, w: int, admissions: Sequence[Admission], now: float) -> None: ...

    def apply_lifecycle(self, w: int, dp_rank: int, events: Sequence[object], now: float) -> None: ...

    def finish_request(self, rid: int, now: float) -> None: ...

    def publish_kv(self, w: int, now: float, events: Sequence[KvEvent], start: float | None = None) -> None: ...

    def publish_fpm(self, w: int, now: float, start: float, fpm: ForwardPassMetrics,
                    occupancy: Metrics | None = None) -> None: ...

    def publish_fpm_run(self, w: int, ends: list[float], start: float, run: FpmRun) -> None: ...


def runs_enabled_by_env() -> bool:
    return os.environ.get("SERVESIM_RUNS", "1").strip().lower() not in ("0", "false", "no", "off")


class RunDriver:
    """Per-replayer run bookkeeping: external-event horizon and in-flight runs."""

    def __init__(self, rp: RunHost, num_workers: int, cross_worker: bool) -> None:
        self.rp = rp
        self.ext: list[tuple[float, int]] = []  # (time, seq) of every non-pass-end event
        self.in_flight: list[EngineRunStarted | None] = [None] * num_workers
        self.released: list[int] = [0] * num_workers  # run passes whose KV events went out
        self.retired: list[int] = [0] * num_workers  # entries of completed_at already retired
        self.with_done = 0  # runs in flight with completions before their last pass
        self.count = 0  # runs in flight
        self.cross_worker = cross_worker
        self.flush = rp.router.wants_kv_events or bool(rp.kv_sinks)
        self.pass_ms = [0.0] * num_workers  # each worker's last run's mean pass duration
        self.extended = 0  # runs whose horizon skipped arrivals proved to go elsewhere
        # Totals over the replay (for tests and profiles): runs committed, the passes they
        # covered, and the requests they completed before their last pass.
        self.committed = 0
        self.run_passes = 0
        self.completed_within = 0
        self.admitted = 0  # requests admitted by runs' first passes (RankRun.admissions)
        self.continued = 0  # runs carried on at their last boundary (continue_run)
        # Per request, the most tokens it can emit (None: arrivals bound every run).
        self.planned: list[int] | None = None
        # A replayer that knows more about what reaches a worker bounds its runs itself:
        # ``(worker, now, next external event) -> horizon`` (disaggregated replay).
        self.horizon_of: Callable[[int, float, float], float] | None = None
        if exclusion_applies(rp, num_workers, cross_worker):
            mml = getattr(rp.engines[0].ranks[0].config, "max_model_len", None)
            outputs, inputs = rp.output_length, rp.log.input_length
            self.planned = list(outputs) if mml is None else [
                min(out, max(0, mml - inp)) for out, inp in zip(outputs, inputs, strict=True)]

    def horizon(self, w: int, now: float) -> float:
        ext = self.ext
        while ext and ext[0][0] <= now:
            heapq.heappop(ext)
        h = ext[0][0] if ext else float("inf")
        if self.horizon_of is not None:
            return self.horizon_of(w, now, h)
        if self.cross_worker:
            for v, e in enumerate(self.rp.engines):
                if v == w:
                    continue
                end = e.pending_end_ms
                if end is None:
                    # An idle worker that is ready starts a pass at this same time (later in
                    # the driver's worker order), whose end can release work at any time:
                    # only one pass is certain to precede it.
                    if h > now and e.is_ready():
                        h = now
                elif end < h:
                    h = end
        return h

    def try_run(self, w: int, engine: RunEngine, now: float) -> bool:
        horizon = self.horizon(w, now)
        if not now < horizon:
            return False  # no pass could start before it: the engine would decline
        cap = 1 << 30
        # A routed request still without its first token (prefill tokens pending) is almost
        # always about to be admitted, which no run covers: no need to look ahead then.
        if (self.planned is not None and horizon != float("inf") and self.pass_ms[w] > 0
                and not self.rp.state.prefill_tokens[w]):
            horizon, cap = self._extend(w, now, horizon)
        run = engine.execute_run(now, horizon, cap, through_completions=not self.cross_worker)
        if run is None:
            return False
        rp = self.rp
        if cap != 1 << 30:
            self._check_completions(w, run)
        rp.passes += run.num_passes
        rp.pass_busy_ms[w] += run.end_ms - now  # a run's passes follow each other from now
        self.in_flight[w] = run
        self.released[w] = 0
        self.retired[w] = 0
        if run.completed_at:
            self.with_done += 1
            self.completed_within += len(run.completed_at)
        self.count += 1
        self.committed += 1
        self.run_passes += run.num_passes
        rp.start_busy[w] = False
        rp.last_zero[w] = False
        if run.admissions:  # the first pass's admissions, as _start_effects takes them
            self.admitted += len(run.admissions)
            rp.note_admissions(w, run.admissions, now)
        rp.push_event(run.end_ms, 0, w, run.first_pass_id)  # PASS_END
        return True

    def continue_run(self, w: int, now: float) -> bool:
        """At the last boundary ``now`` of ``w``'s in-flight run, when nothing else is due
        then: carry the run on with the passes a new run from ``now`` would commit
        (``RunEngine.extend_run``), instead of completing it and starting that run. True when
        it did (the run stays in flight to its new end; nothing of it is released yet).

        Equivalent to :meth:`complete` then :meth:`try_run` at ``now`` because nothing is
        released at this boundary: the engine declines when a command reached it during the
        run or its completion would have had effects (a completion at the last pass, ...),
        and the horizon is the one ``try_run`` would compute (it depends on the other
        workers only, and nothing else happens at ``now``). The caller keeps whatever reads
        the run's passes before its completion exact (``DisaggReplayer._run_tokens``)."""
        run = self.in_flight[w]
        if run is None or run.num_passes >= CONTINUE_MAX:
            return False
        horizon = self.horizon(w, now)
        if not now < horizon:
            return False
        rp = self.rp
        more = rp.engines[w].extend_run(run, now, horizon, 1 << 30,
                                        through_completions=not self.cross_worker)
        if more is None:
            return False
        k = more.num_passes - run.num_passes
        rp.passes += k
        rp.pass_busy_ms[w] += more.end_ms - now  # as try_run adds a run from now
        added = len(more.completed_at) - len(run.completed_at)
        if added:
            if not run.completed_at:
                self.with_done += 1
            self.completed_within += added
        self.in_flight[w] = more
        self.continued += 1
        self.run_passes += k
        rp.push_event(more.end_ms, 0, w, more.first_pass_id)  # PASS_END
        return True

    def release_kv(self, now: float) -> None:
        """Before routing at ``now``: hand the router the KV events of run passes that ended."""
        rp = self.rp
        for w, run in enumerate(self.in_flight):
            if run is None:
                continue
            ends = run.pass_ends
            upto = self.released[w]
            while upto < len(ends) - 1 and ends[upto] <= now:
                upto += 1
            if upto > self.released[w]:
                evs = rp.engines[w].take_run_kv_events(upto)
                self.released[w] = upto
                for j in sorted(evs):
                    if evs[j]:
                        rp.publish_kv(w, ends[j], evs[j], ends[j - 1] if j else run.started_at_ms)

    def release_done(self, now: float) -> None:
        """Before routing at ``now``: retire requests completed at run passes ending by now."""
        for w, run in enumerate(self.in_flight):
            if run is None or not run.completed_at:
                continue
            self._retire(w, run, now)

    def _retire(self, w: int, run: EngineRunStarted, upto: float) -> None:
        done = run.completed_at
        ends = run.pass_ends
        i = self.retired[w]
        terminal = self.rp.finish_request
        while i < len(done) and ends[done[i][0]] <= upto:
            j, rid = done[i]
            terminal(rid, ends[j])
            i += 1
        self.retired[w] = i

    def complete(self, w: int, now: float) -> None:
        rp = self.rp
        run = self.in_flight[w]
        assert run is not None
        if run.completed_at:
            self._retire(w, run, now)
            self.with_done -= 1
        self.in_flight[w] = None
        self.count -= 1
        self.pass_ms[w] = (now - run.started_at_ms) / run.num_passes
        done = rp.engines[w].complete_run(run.first_pass_id, now)
        rp.dirty.add(w)
        eff = done.effects
        ends = eff.pass_ends
        rp.log.run_tokens(eff.members, eff.absent_last, ends, eff.started_at_ms,
                          eff.completed_before, rp.log_key[w], eff.completed)
        if eff.cached_tokens:  # the first pass's admissions (their first token is in it)
            prefill_done = rp.state.prefill_done
            for rid in eff.cached_tokens:
                prefill_done(rid)
            rp.log.cached_at_first_token(eff.cached_tokens)
        start = eff.started_at_ms
        for j in sorted(eff.kv_events):
            if eff.kv_events[j]:
                rp.publish_kv(w, ends[j], eff.kv_events[j], ends[j - 1] if j else start)
        fpms = eff.forward_pass_metrics
        if (type(fpms) is FpmRun and rp.fpm_by_run
                and rp.timeline is None):  # lines by column (servesim.fast.fpm_runs)
            rp.publish_fpm_run(w, ends, start, fpms)
        elif fpms is not None and (rp.fpm_sinks or rp.timeline is not None):
            occupancy = eff.pass_metrics if rp.timeline is not None else None
            for j, fpm in enumerate(fpms):
                rp.publish_fpm(w, ends[j], ends[j - 1] if j else start, fpm,
                        occupancy[j] if occupancy else None)
        for rid in eff.completed:
            rp.finish_request(rid, now)
        if eff.lifecycle_events:  # handoffs at the last boundary (disaggregated replay)
            rp.apply_lifecycle(w, 0, eff.lifecycle_events, now)
        if rp.zero_streak[w]:
            rp.zero_streak[w] = 0
            rp.countdown[w] = None

    def check_routed(self, w: int, now: float) -> None:
        """Internal check: an arrival routed to ``w`` must not precede its run's last pass."""
        run = self.in_flight[w]
        if run is not None:
            ends = run.pass_ends
            last_start = ends[-2] if len(ends) > 1 else run.started_at_ms
            if now <= last_start:
                raise ReplayError(
                    f"internal: an arrival at {now} ms was routed to worker {w}, whose run "
                    f"extends past it (last pass starts at {last_start} ms)")

    # -- horizons past arrivals routed elsewhere -----------------------------------------

    def _extend(self, w: int, now: float, horizon: float) -> tuple[float, int]:
        """``(horizon, most passes)`` of a run on ``w`` that skips the next arrivals the router
        proves go elsewhere.

        The router's margins hold while ``w``'s requests that finish before an arrival
        relieve less than its margin. A request finishes no sooner than after its remaining
        ``planned - emitted`` tokens, one per steady pass, so a run of at most ``M`` passes
        lets only the requests with at most ``M`` tokens left finish before a skipped arrival
        (at most ``M`` passes end by it). For each number ``K`` of skipped arrivals this gives
        the largest cap ``M``; ``K`` is chosen to make the run longest by the worker's last
        pass duration (a guess that affects speed only, never results)."""
        rp = self.rp
        turns = rp.first_turns
        i = max(rp.first_next - 1, 0)
        while i < len(turns) and turns[i][0] <= now:
            i += 1
        if i >= len(turns) or turns[i][0] != horizon:
            return horizon, 1 << 30  # the next event is no first turn
        look = turns[i:i + LOOKAHEAD]
        state, bs = rp.state, rp.block_size
        # planned is set only for a router that proves exclusions (exclusion_applies)
        router = cast("ProvesExclusion", rp.router)
        ntok, planned = rp.log.ntok, self.planned
        assert planned is not None
        per_pass = self.pass_ms[w]
        best_len = -(-(horizon - now) // per_pass)  # passes before the first arrival, as now
        best = (horizon, 1 << 30)
        prompts = (rp.turns[rid] for _at, _seq, rid in look)  # lazy: often one read
        arrivals = ((t.prompt, prompt_hashes(t.prompt, bs, t.lora) if t.lora else
                     t.prompt.block_hashes_elided(bs)[0]) for t in prompts) if (
            rp.router.wants_block_hashes) else ((t.prompt, ()) for t in prompts)
        margin = float("inf")
        left: _Finishers | None = None
        for k, m in enumerate(router.exclusion_margins(w, arrivals, state), 1):
            if not m > 0:
                break
            margin = min(margin, m)
            if margin == float("inf"):  # an exact exclusion (round-robin): no relief matters
                cap = 1 << 30
            elif left is None:  # built once the first arrival is excluded at all
                rp.log.settle_worker(w)  # ntok current (servesim.fast.cohorts)
                ids = state.on_slot[w]
                rems = map(sub, map(planned.__getitem__, ids), map(ntok.__getitem__, ids))
                left = _Finishers(list(map(or_, map(lshift, rems, repeat(32)), ids)),
                                  state, router.exclusion_relief)
                cap = left.largest_cap(margin)
            else:
                cap = left.largest_cap(margin)
            if cap < 1 or cap <= best_len:
                break  # caps only shrink with more skipped arrivals: no longer run ahead
            nxt = look[k][0] if k < len(look) else (
                turns[i + k][0] if i + k < len(turns) else float("inf"))
            length = min(cap, -(-(nxt - now) // per_pass))
            if length > best_len:
                best_len, best = length, (nxt, cap)
        if best[0] != horizon:
            self.extended += 1
        return best

    def _check_completions(self, w: int, run: EngineRunStarted) -> None:
        """Internal check of the bound :meth:`_extend` relies on: a completion at pass ``j``
        must have had at most ``j + 1`` tokens left."""
        planned, ntok = self.planned, self.rp.log.ntok
        assert planned is not None
        if run.completed_at:
            self.rp.log.settle_worker(w)  # ntok current (servesim.fast.cohorts)
        for j, rid in run.completed_at:
            if planned[rid] - ntok[rid] > j + 1:
                raise ReplayError(f"internal: request {rid} finished before its planned length")


#: Passes after which a run is completed rather than carried on (a run carried on is rebuilt
#: with all its pass ends, so this bounds that copy).
CONTINUE_MAX = 1024

#: Arrivals a run start looks past at most.
LOOKAHEAD = 16


class _Finishers:
    """A worker's in-flight requests by tokens left (ascending), drawn lazily from a heap of
    ``remaining << 32 | request id`` keys with the running sum of their reliefs: a cap is
    usually decided by the first one or two."""

    __slots__ = ("_heap", "_rems", "_cum", "_state", "_relief")

    def __init__(self, keys: list[int], state: ClusterState,
                 relief: Callable[[ClusterState, int], float]) -> None:
        heapq.heapify(keys)
        self._heap = keys
        self._rems: list[int] = []
        self._cum: list[float] = []
        self._state = state
        self._relief = relief

    def largest_cap(self, margin: float) -> int:
        """The largest ``M`` with the summed relief of the requests with at most ``M`` tokens
        left below ``margin``; 1 << 30 when all of them fit."""
        if not margin > 0:
            return 0  # not even a run in which nothing finishes
        rems, cum = self._rems, self._cum
        i = 0
        while True:
            if i == len(rems):
                if not self._heap:
                    return 1 << 30
                key = heapq.heappop(self._heap)
                rems.append(key >> 32)
                cum.append((cum[-1] if cum else 0.0) + self._relief(self._state, key & _RID))
            if not cum[i] < margin:
                return rems[i] - 1
            i += 1


_RID: Final = (1 << 32) - 1


def exclusion_applies(rp: RunHost, num_workers: int, cross_worker: bool) -> bool:
    """Runs may skip arrivals proved to go elsewhere only in the case argued for: several
    dp_size-1 workers in aggregated timestamp-mode replay without sessions or deadlines,
    behind a router that proves exclusions; sinks only when their output is merged in an
    order that does not depend on runs (servesim.fast.sink_merge)."""
    sinks_ok = rp.sink_merge is not None or not (rp.kv_sinks or rp.fpm_sinks)
    return (num_workers > 1 and not cross_worker and not rp.has_deadlines
            and sinks_ok and rp.engines[0].dp_size == 1
            and rp.concurrency is None and type(rp).__name__ == "Replayer"
            and proves_exclusion(rp.router))


__all__ = ["RunDriver", "runs_enabled_by_env"]
