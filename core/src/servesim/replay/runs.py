"""The Replayer's side of runs of passes (servesim.runs; DESIGN.md §7).

When an idle engine is ready, the driver first offers it a *run* up to its horizon: the time
of the next heap event that could reach that engine. Any arrival can be routed to any worker
and a deadline or external event may concern it, so every non-pass-end event bounds every
run; another worker's pass end matters only when it can release work at its own time (a next
session turn, or a concurrency slot). Events due at a run pass's start were delivered before
the run (the driver only starts passes after the current time's events), so a run is exactly
the passes stepping would have run before that event.

Run effects are consumed in bulk: each member's token count grows by ``k``, its first gap in
the run is its own ITL sample and the ``k - 1`` later gaps are stored once with a weight
(:meth:`servesim.replay.stats.RequestLog.run_tokens`). KV events go to the router and sinks
stamped with their own pass end; when a router reads KV state, the events of run passes that
ended by an arrival are released to it (``Engine.take_run_kv_events``) before routing, as
stepping would have delivered them. With several workers *and* KV or FPM sinks runs are off,
because a sink's interleaving of workers would then differ from stepping's.

Runs continue through completions when no completion can release work (no later session
turn, no concurrency limit): the requests completed before a run's last pass are known when
it starts (``EngineRunStarted.completed_at``) and are retired at their own boundary before any
later arrival is routed (:meth:`RunDriver.release_done`), so routers and ``max_in_flight`` see
exactly stepping's state.

``SERVESIM_RUNS=0`` in the environment (or ``Replayer(runs=False)``) forces stepping.
"""

from __future__ import annotations

import heapq
import os
from typing import TYPE_CHECKING

from servesim.runs import EngineRunStarted

if TYPE_CHECKING:
    from servesim.engine import Engine
    from servesim.replay.driver import Replayer


def runs_enabled_by_env() -> bool:
    return os.environ.get("SERVESIM_RUNS", "1").strip().lower() not in ("0", "false", "no", "off")


class RunDriver:
    """Per-replayer run bookkeeping: external-event horizon and in-flight runs."""

    def __init__(self, rp: Replayer, num_workers: int, cross_worker: bool) -> None:
        self.rp = rp
        self.ext: list[tuple[float, int]] = []  # (time, seq) of every non-pass-end event
        self.in_flight: list[EngineRunStarted | None] = [None] * num_workers
        self.released: list[int] = [0] * num_workers  # run passes whose KV events went out
        self.retired: list[int] = [0] * num_workers  # entries of completed_at already retired
        self.with_done = 0  # runs in flight with completions before their last pass
        self.count = 0  # runs in flight
        self.cross_worker = cross_worker
        self.flush = rp.router.wants_kv_events or bool(rp.kv_sinks)

    def horizon(self, w: int, now: float) -> float:
        ext = self.ext
        while ext and ext[0][0] <= now:
            heapq.heappop(ext)
        h = ext[0][0] if ext else float("inf")
        if self.cross_worker:
            for v, e in enumerate(self.rp.engines):
                end = e.pending_end_ms
                if v != w and end is not None and end < h:
                    h = end
        return h

    def try_run(self, w: int, engine: Engine, now: float) -> bool:
        run = engine.execute_run(now, self.horizon(w, now),
                                 through_completions=not self.cross_worker)
        if run is None:
            return False
        rp = self.rp
        rp.passes += run.num_passes
        self.in_flight[w] = run
        self.released[w] = 0
        self.retired[w] = 0
        if run.completed_at:
            self.with_done += 1
        self.count += 1
        rp._start_busy[w] = False  # noqa: SLF001
        rp._last_zero[w] = False  # noqa: SLF001
        rp._push(run.end_ms, 0, w, run.first_pass_id)  # noqa: SLF001 - _PASS_END
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
                        rp._kv(w, ends[j], evs[j])  # noqa: SLF001

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
        terminal = self.rp._terminal  # noqa: SLF001
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
        done = rp.engines[w].complete_run(run.first_pass_id, now)
        rp._dirty.add(w)  # noqa: SLF001
        eff = done.effects
        ends = eff.pass_ends
        rp.log.run_tokens(eff.members, eff.absent_last, ends, eff.started_at_ms,
                          eff.completed_before)
        for j in sorted(eff.kv_events):
            if eff.kv_events[j]:
                rp._kv(w, ends[j], eff.kv_events[j])  # noqa: SLF001
        if eff.forward_pass_metrics is not None and rp.fpm_sinks:
            from servesim.replay.driver import _publish

            for j, fpm in enumerate(eff.forward_pass_metrics):
                for sink in rp.fpm_sinks:
                    _publish(sink, w, ends[j], fpm)
        for rid in eff.completed:
            rp._terminal(rid, now)  # noqa: SLF001
        if rp._zero_streak[w]:  # noqa: SLF001
            rp._zero_streak[w] = 0  # noqa: SLF001
            rp._countdown[w] = None  # noqa: SLF001


__all__ = ["RunDriver", "runs_enabled_by_env"]
