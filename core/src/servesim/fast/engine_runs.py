"""The engine's side of runs of passes (servesim.fast.runs; docs/architecture.md, "The speed overlay").

:class:`RunEngine` is an :class:`~servesim.engine.Engine` that can also commit a *run* of
passes: its rank (a dp_size-1 engine's, declaring
:class:`~servesim.fast.rank_runs.RunsOfPasses`) commits ``k`` steady passes in one call, and
the engine hands out their ends as an array. The engine factory builds it when the speed
overlay fits it (:meth:`servesim.fast.overlay.FastOverlay.fit_factory`); every pass it steps
is :class:`~servesim.engine.Engine`'s own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from servesim.contract import Command, CommandEffects
from servesim.engine import Engine, EnginePassCompleted, PendingGroupPass, check_time
from servesim.errors import EngineError
from servesim.fast.rank_runs import RunsOfPasses
from servesim.fast.run_pending import check_run
from servesim.fast.runs import EngineRunCompleted, EngineRunStarted
from servesim.rank import Rank
from servesim.timing.pricing import prices_pass_shapes


class RunEngine(Engine):
    """An engine that may commit runs of passes (:meth:`execute_run`) between stepped ones."""

    def __init__(self, worker_id: int, ranks: Sequence[Rank]) -> None:
        super().__init__(worker_id, ranks)
        # A timing model that prices whole passes is priced pass by pass: runs price many
        # passes at once through the two-method contract (servesim.timing.shape).
        services = self.ranks[0].services
        self._runs_allowed = not prices_pass_shapes(services.timing if services is not None else None)
        first = self.ranks[0]
        self._run_rank: RunsOfPasses[Any] | None = (
            first if self.dp_size == 1 and isinstance(first, RunsOfPasses) else None)
        # > 0: the in-flight pass is a run of that many passes.
        self._run_passes = 0
        # A command was applied while the in-flight run was in flight (no extend_run then).
        self._run_touched = False

    @classmethod
    def over(cls, engine: Engine) -> RunEngine:
        """``engine``'s ranks in a run engine; ``engine`` must not have started a pass yet (a
        fresh engine from a factory the overlay did not fit). A run engine is returned as it is."""
        if isinstance(engine, RunEngine):
            return engine
        return cls(engine.worker_id, engine.ranks)

    def apply(self, dp_rank: int, command: Command, now_ms: float) -> CommandEffects:
        if self._run_passes:
            self._run_touched = True
        return super().apply(dp_rank, command, now_ms)

    def complete_pass(self, pass_id: int, end_ms: float) -> EnginePassCompleted:
        if self._run_passes:
            raise EngineError(f"engine {self.worker_id}: a run is in flight; use complete_run")
        return super().complete_pass(pass_id, end_ms)

    def execute_run(
        self, now_ms: float, horizon_ms: float, max_passes: int = 1 << 30,
        through_completions: bool = False,
    ) -> EngineRunStarted | None:
        """Commit a run of passes (:meth:`RunsOfPasses.execute_run`) or return None (nothing consumed).

        Only a dp_size-1 engine whose rank declares :class:`RunsOfPasses` runs: with several
        ranks the DP barrier makes every pass a group decision. A run consumes one pass id
        and one wave step per pass. ``through_completions``: the caller can take completions
        before the run's last pass (servesim.fast.runs); passed on only to ranks whose class
        sets ``runs_through_completions = True``.
        """
        self._check_alive()
        check_time("now_ms", now_ms)
        if self._pending is not None:
            raise EngineError(f"engine {self.worker_id}: a pass is already in flight")
        runner = self._run_rank
        if runner is None or not now_ms < horizon_ms or max_passes < 1 or not self._runs_allowed:
            return None
        w = self._single_handoff
        if not self.ranks[0].is_ready() or (w is not None and w.waiting_for_external_command()):
            return None
        try:
            if through_completions and runner.runs_through_completions:
                run = runner.execute_run(now_ms, horizon_ms, max_passes, through_completions=True)
            else:
                run = runner.execute_run(now_ms, horizon_ms, max_passes)
            if run is None:
                return None
            check_run(run, now_ms, horizon_ms, max_passes)
        except Exception as exc:
            raise self._poison("execute_run on rank 0", exc) from exc
        k = run.num_passes
        pass_id = self._next_pass_id
        self._next_pass_id += k
        self._wave_step += k
        self._pending = PendingGroupPass(pass_id, now_ms, run.end_ms, {0: run.pending})
        self._run_passes = k
        self._run_touched = False
        return EngineRunStarted(pass_id, now_ms, run.pass_ends, run.completed_at, run.members,
                                run.admissions)

    def extend_run(
        self, started: EngineRunStarted, now_ms: float, horizon_ms: float,
        max_passes: int = 1 << 30, through_completions: bool = False,
    ) -> EngineRunStarted | None:
        """Continue the in-flight run ``started`` at its last boundary ``now_ms`` with more
        passes, as :meth:`complete_run` followed by :meth:`execute_run` at ``now_ms`` would
        have committed them, or return None (nothing consumed; complete the run then).

        Only when no command reached the engine during the run and the rank can carry its run
        state on: a rank's ``extend_run(pending, now, horizon, max_passes,
        through_completions)`` returns the new passes' ends and their completions before the
        last one (``(pass, request id)``, passes from 0), or None
        (servesim_vllm.fast.runs.extend_run). The result is the whole run so far (``started``'s
        passes, then the new ones), still completed by one :meth:`complete_run`."""
        pending = self._pending
        if (pending is None or not self._run_passes or self._run_touched
                or pending.pass_id != started.first_pass_id or now_ms != pending.end_ms
                or not now_ms < horizon_ms or max_passes < 1 or self._poisoned is not None):
            return None
        runner, w = self._run_rank, self._single_handoff
        if runner is None or not self.ranks[0].is_ready() or (
                w is not None and w.waiting_for_external_command()):
            return None
        try:
            more = runner.extend_run(pending.by_rank[0], now_ms, horizon_ms, max_passes,
                                     through_completions)
            if more is None:
                return None
            ends, completed_at = more
            k = len(ends)
            # check_run's checks: 1..max_passes passes, the last starting before the horizon
            if not 1 <= k <= max_passes or not (k == 1 or ends[-2] < horizon_ms) \
                    or not ends[0] >= now_ms or ends[-1] == float("inf"):
                raise EngineError(f"an extended run's boundaries {ends} break the contract "
                                  f"(now {now_ms}, horizon {horizon_ms})")
        except Exception as exc:
            raise self._poison("extend_run on rank 0", exc) from exc
        before = self._run_passes
        self._next_pass_id += k
        self._wave_step += k
        pending.end_ms = ends[-1]
        self._run_passes = before + k
        done = started.completed_at
        if completed_at:
            done = done + tuple([(j + before, rid) for j, rid in completed_at])
        return EngineRunStarted(started.first_pass_id, started.started_at_ms,
                                started.pass_ends + tuple(ends), done, started.members,
                                started.admissions)

    def take_run_kv_events(self, before_pass: int) -> dict[int, list[Any]]:
        """Release, early, the KV events of the in-flight run's passes ``< before_pass``.

        A driver calls this once those passes' ends are due, so a router sees them on time;
        :meth:`complete_run` then leaves them out.
        """
        self._check_alive()
        pending = self._pending
        if pending is None or not self._run_passes:
            raise EngineError(f"engine {self.worker_id}: no run in flight")
        try:
            return cast("RunsOfPasses[Any]", self._run_rank).take_run_kv_events(
                pending.by_rank[0], before_pass)
        except Exception as exc:
            raise self._poison("take_run_kv_events on rank 0", exc) from exc

    def complete_run(self, first_pass_id: int, end_ms: float) -> EngineRunCompleted:
        """Release the in-flight run at its modelled last boundary."""
        self._check_alive()
        check_time("end_ms", end_ms)
        pending = self._pending
        if pending is None or not self._run_passes:
            raise EngineError(f"engine {self.worker_id}: no run in flight")
        if first_pass_id != pending.pass_id:
            raise EngineError(
                f"engine {self.worker_id}: pass id {first_pass_id} does not match the run "
                f"starting at pass {pending.pass_id}"
            )
        if end_ms < pending.end_ms:
            raise EngineError(
                f"engine {self.worker_id}: end_ms {end_ms} is before the modelled end "
                f"{pending.end_ms}"
            )
        self._pending = None
        self._run_passes = 0
        try:
            effects = cast("RunsOfPasses[Any]", self._run_rank).complete_run(
                pending.by_rank[0], pending.end_ms)
        except Exception as exc:
            raise self._poison("complete_run on rank 0", exc) from exc
        self._reset_wave_if_drained()
        return EngineRunCompleted(pending.pass_id, effects)


__all__ = ["RunEngine"]
