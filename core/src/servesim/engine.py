"""Engine: ``dp_size`` ranks composed behind one contract (attention data parallelism).

Follows aisimulate-engine.md §2.4 (``GeneralizedMockerEngine``): one group pass in flight,
every ready rank commits at the same ``now``, all siblings (idle ones too) share the slowest
rank's boundary, commands are error-atomic and never poison, and a failure inside a grouped
operation (execute, complete, internal work) poisons the engine because earlier ranks may
already have committed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from attrs import define, frozen

from servesim.contract import Command, CommandEffects, PassCompletionEffects, PassStartEffects
from servesim.errors import EngineError, EnginePoisoned
from servesim.mechanics.numeric import validate_time
from servesim.rank import (
    NO_RETRY_HINT,
    CommandContext,
    GroupPassHooks,
    Handoff,
    InternalWork,
    Rank,
    RankIdentity,
    RetryHint,
)

_INF: Final = float("inf")


def check_time(name: str, value: float) -> None:
    """:func:`validate_time`, with its common case (a finite float >= 0) decided here: the
    engine (and the run engine, servesim.fast.engine_runs) checks every pass's times."""
    if type(value) is not float or not 0.0 <= value < _INF:
        validate_time(name, value)


@frozen(slots=True)
class RankPassStarted:
    dp_rank: int
    rank_end_ms: float
    effects: PassStartEffects


@frozen(slots=True)
class EnginePassStarted:
    """``by_rank`` lists only ranks that executed, in rank order."""

    pass_id: int
    started_at_ms: float
    end_ms: float
    participating_ranks: int
    retry: RetryHint
    by_rank: tuple[RankPassStarted, ...]


@frozen(slots=True)
class RankCompletion:
    dp_rank: int
    effects: PassCompletionEffects


@frozen(slots=True)
class EnginePassCompleted:
    """Effects of executed ranks and of idle siblings that reported any, in rank order."""

    pass_id: int
    end_ms: float
    by_rank: tuple[RankCompletion, ...]


@define(slots=True)
class PendingGroupPass:
    """What an engine holds of its in-flight pass: its id, start and modelled end, and each
    executing rank's pending state (passed back to the rank's ``complete_pass``)."""

    pass_id: int
    started_at_ms: float
    end_ms: float
    by_rank: dict[int, Any]


class Engine:
    """One logical worker made of ``dp_size`` ranks."""

    def __init__(self, worker_id: int, ranks: Sequence[Rank]) -> None:
        if not ranks:
            raise EngineError("an engine needs at least one rank")
        self.worker_id = worker_id
        self.ranks: list[Rank] = list(ranks)
        self.dp_size = len(self.ranks)
        self._next_pass_id = 0
        self._wave_step = 0
        self._pending: PendingGroupPass | None = None
        self._poisoned: str | None = None
        # The common dp_size-1 engine: the group logic reduces to its one rank, and the
        # per-pass methods below take a direct path (same calls, in the same order).
        self._single: Rank | None = self.ranks[0] if self.dp_size == 1 else None
        # The ranks' declared capabilities (servesim.rank): a rank is asked only for the
        # members of the capabilities it declares.
        self._hooks: list[GroupPassHooks] = [r for r in self.ranks if isinstance(r, GroupPassHooks)]
        # (rank, its Handoff view or None): only a Handoff rank waits for external commands.
        self._waiting: list[tuple[Rank, Handoff | None]] = [
            (r, r if isinstance(r, Handoff) else None) for r in self.ranks]
        self._internal: list[tuple[int, InternalWork]] = [
            (i, r) for i, r in enumerate(self.ranks) if isinstance(r, InternalWork)]
        self._deadlines: list[InternalWork] = [r for _, r in self._internal]
        self._idle_hooks: list[GroupPassHooks | None] = [
            r if isinstance(r, GroupPassHooks) else None for r in self.ranks]
        first = self.ranks[0]
        self._single_hooks: GroupPassHooks | None = (
            self._idle_hooks[0] if self._single is not None else None)
        self._single_handoff: Handoff | None = (
            first if self._single is not None and isinstance(first, Handoff) else None)

    @classmethod
    def build(
        cls, worker_id: int, dp_size: int, make_rank: Callable[[RankIdentity], Rank]
    ) -> Engine:
        """The provider-injection seam: ``make_rank`` may close over shared objects."""
        ranks = []
        for dp_rank in range(dp_size):
            identity = RankIdentity(worker_id, dp_rank, dp_size)
            try:
                ranks.append(make_rank(identity))
            except Exception as exc:
                raise EngineError(f"building rank {dp_rank} of worker {worker_id}: {exc}") from exc
        return cls(worker_id, ranks)

    # -- state --------------------------------------------------------------------------

    @property
    def poisoned(self) -> str | None:
        return self._poisoned

    @property
    def pass_in_flight(self) -> bool:
        return self._pending is not None

    @property
    def pending_end_ms(self) -> float | None:
        return self._pending.end_ms if self._pending is not None else None

    @property
    def pending_started_at_ms(self) -> float | None:
        """Start time of the in-flight pass (for busy-time accounting), None when idle."""
        return self._pending.started_at_ms if self._pending is not None else None

    def _check_alive(self) -> None:
        if self._poisoned is not None:
            raise EnginePoisoned(f"engine {self.worker_id} is poisoned: {self._poisoned}")

    def _poison(self, what: str, exc: BaseException) -> EnginePoisoned:
        self._poisoned = f"{what} failed: {str(exc) or type(exc).__name__}"  # MemoryError() has no text
        return EnginePoisoned(f"engine {self.worker_id} is now poisoned: {self._poisoned}")

    def _ready_unblocked(self) -> list[int]:
        return [
            i
            for i, (r, h) in enumerate(self._waiting)
            if r.is_ready() and not (h is not None and h.waiting_for_external_command())
        ]

    def is_ready(self) -> bool:
        if self._poisoned is not None or self._pending is not None:
            return False
        r = self._single
        if r is not None:
            w = self._single_handoff
            return bool(r.is_ready() and not (w is not None and w.waiting_for_external_command()))
        return any(r.is_ready() and not (h is not None and h.waiting_for_external_command())
                   for r, h in self._waiting)

    def waiting_for_external_command(self) -> bool:
        if self._poisoned is not None or self._pending is not None:
            return False
        ready = [h for r, h in self._waiting if r.is_ready()]
        return bool(ready) and all(h is not None and h.waiting_for_external_command() for h in ready)

    def is_drained(self) -> bool:
        if self._poisoned is not None or self._pending is not None:
            return False
        return all(r.is_drained() for r in self.ranks)

    def _reset_wave_if_drained(self) -> None:
        if self._pending is not None:
            return
        single = self._single
        if single.is_drained() if single is not None else all(
            r.is_drained() for r in self.ranks
        ):
            self._wave_step = 0

    # -- commands -----------------------------------------------------------------------

    def apply(self, dp_rank: int, command: Command, now_ms: float) -> CommandEffects:
        """Apply a command to one rank. Errors never poison (reference §2.4)."""
        self._check_alive()
        check_time("now_ms", now_ms)
        if not 0 <= dp_rank < self.dp_size:
            raise EngineError(f"DP rank {dp_rank} out of range for dp_size {self.dp_size}")
        if self._pending is None:
            deadline = self.next_internal_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                raise EngineError(
                    f"internal work is due at {deadline} <= {now_ms}: "
                    "process internal work and retry the command"
                )
        ctx = CommandContext(now_ms, self._pending is not None)
        pending = self._pending.by_rank.get(dp_rank) if self._pending is not None else None
        effects = self.ranks[dp_rank].apply(command, ctx, pending)
        self._reset_wave_if_drained()
        return effects

    # -- passes -------------------------------------------------------------------------

    def execute_pass(self, now_ms: float) -> EnginePassStarted | None:
        """Start a group pass; None (and no pass id consumed) if no rank can run."""
        self._check_alive()
        check_time("now_ms", now_ms)
        if self._pending is not None:
            raise EngineError(f"engine {self.worker_id}: a pass is already in flight")
        if self._single is not None:
            return self._execute_single(now_ms, self._single)
        runnable = self._ready_unblocked()
        if not runnable:
            return None
        pass_id = self._next_pass_id
        wave = self._wave_step
        ranks = self.ranks
        hooks = self._hooks
        try:
            for h in hooks:
                h.prepare_group_pass(wave, self.dp_size)
        except Exception as exc:
            raise self._poison("prepare_group_pass", exc) from exc
        end_ms = now_ms
        retry = NO_RETRY_HINT
        started: list[RankPassStarted] = []
        pendings: dict[int, Any] = {}
        for i in runnable:
            try:
                rp = ranks[i].execute_pass(now_ms)
                if not rp.end_ms >= now_ms or rp.end_ms == float("inf"):
                    raise EngineError(f"rank {i} returned end_ms {rp.end_ms} before now {now_ms}")
            except Exception as exc:
                raise self._poison(f"execute_pass on rank {i}", exc) from exc
            if rp.end_ms > end_ms:
                end_ms = rp.end_ms
            retry = retry.fold(rp.retry)
            started.append(RankPassStarted(i, rp.end_ms, rp.start_effects))
            pendings[i] = rp.pending
        # Ranks have committed by now: a failure here must poison, not silently drop the pass.
        try:
            any_prefill = any(h.prefill_in_pass() for h in hooks)
            any_model = any(h.model_work_in_pass() for h in hooks)
            for h in hooks:
                h.finish_group_pass(any_prefill, any_model)
        except Exception as exc:
            raise self._poison("finish_group_pass", exc) from exc
        self._next_pass_id += 1
        self._wave_step += 1
        self._pending = PendingGroupPass(pass_id, now_ms, end_ms, pendings)
        return EnginePassStarted(pass_id, now_ms, end_ms, self.dp_size, retry, tuple(started))

    def _execute_single(self, now_ms: float, rank: Rank) -> EnginePassStarted | None:
        """:meth:`execute_pass` for one rank: the group steps without the group loops."""
        w = self._single_handoff
        if not rank.is_ready() or (w is not None and w.waiting_for_external_command()):
            return None
        pass_id = self._next_pass_id
        hooks = self._single_hooks
        try:
            if hooks is not None:
                hooks.prepare_group_pass(self._wave_step, 1)
        except Exception as exc:
            raise self._poison("prepare_group_pass", exc) from exc
        try:
            rp = rank.execute_pass(now_ms)
            if not rp.end_ms >= now_ms or rp.end_ms == float("inf"):
                raise EngineError(f"rank 0 returned end_ms {rp.end_ms} before now {now_ms}")
        except Exception as exc:
            raise self._poison("execute_pass on rank 0", exc) from exc
        end_ms = rp.end_ms if rp.end_ms > now_ms else now_ms
        retry = NO_RETRY_HINT.fold(rp.retry)
        try:
            if hooks is not None:
                any_prefill = bool(hooks.prefill_in_pass())
                any_model = bool(hooks.model_work_in_pass())
                hooks.finish_group_pass(any_prefill, any_model)
        except Exception as exc:
            raise self._poison("finish_group_pass", exc) from exc
        self._next_pass_id += 1
        self._wave_step += 1
        self._pending = PendingGroupPass(pass_id, now_ms, end_ms, {0: rp.pending})
        return EnginePassStarted(pass_id, now_ms, end_ms, 1, retry,
                                 (RankPassStarted(0, rp.end_ms, rp.start_effects),))

    def complete_pass(self, pass_id: int, end_ms: float) -> EnginePassCompleted:
        """Release the in-flight pass; ranks see the modelled boundary even if ``end_ms`` is late."""
        self._check_alive()
        check_time("end_ms", end_ms)
        pending = self._pending
        if pending is None:
            raise EngineError(f"engine {self.worker_id}: no pass in flight")
        if pass_id != pending.pass_id:
            raise EngineError(
                f"engine {self.worker_id}: pass id {pass_id} does not match in-flight pass "
                f"{pending.pass_id}"
            )
        if end_ms < pending.end_ms:
            raise EngineError(
                f"engine {self.worker_id}: end_ms {end_ms} is before the modelled end "
                f"{pending.end_ms}"
            )
        self._pending = None
        modelled = pending.end_ms
        single = self._single
        if single is not None and 0 in pending.by_rank:
            try:
                done = single.complete_pass(pending.by_rank[0], modelled)
            except Exception as exc:
                raise self._poison("complete_pass on rank 0", exc) from exc
            if single.is_drained():
                self._wave_step = 0
            return EnginePassCompleted(pending.pass_id, modelled, (RankCompletion(0, done),))
        out: list[RankCompletion] = []
        for i, rank in enumerate(self.ranks):
            try:
                if i in pending.by_rank:
                    out.append(RankCompletion(i, rank.complete_pass(pending.by_rank[i], modelled)))
                else:
                    hook = self._idle_hooks[i]
                    idle = hook.complete_idle_group_pass(pending.started_at_ms, modelled) \
                        if hook is not None else None
                    if idle is not None:
                        out.append(RankCompletion(i, idle))
            except Exception as exc:
                raise self._poison(f"complete_pass on rank {i}", exc) from exc
        self._reset_wave_if_drained()
        return EnginePassCompleted(pending.pass_id, modelled, tuple(out))

    # -- internal work ------------------------------------------------------------------

    def next_internal_deadline_ms(self) -> float | None:
        """Masked (None) while a pass is in flight or when poisoned."""
        if self._poisoned is not None or self._pending is not None:
            return None
        best: float | None = None
        for r in self._deadlines:
            d = r.next_internal_deadline_ms()
            if d is not None and d != float("inf") and (best is None or d < best):
                best = d
        return best

    def process_internal_work(self, now_ms: float) -> list[tuple[int, PassStartEffects]]:
        self._check_alive()
        check_time("now_ms", now_ms)
        if self._pending is not None:
            return []
        out = []
        for i, r in self._internal:
            d = r.next_internal_deadline_ms()
            if d is None or d > now_ms:
                continue
            try:
                out.append((i, r.process_internal_work(now_ms, False)))
            except Exception as exc:
                raise self._poison(f"process_internal_work on rank {i}", exc) from exc
        self._reset_wave_if_drained()
        return out
