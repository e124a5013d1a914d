"""Engine composition (attention DP) against aisimulate-engine.md §2.4 and the §13.1 scenarios.

The ranks here are small scripted fakes: each job emits one token per pass until its
``max_output_tokens`` are out, every call the engine makes is recorded, and failures can be
switched on per method. That lets each test pin exactly what the Engine asked of which rank.
"""

from __future__ import annotations

from typing import Any

import pytest
from servesim.contract import (
    APPLIED,
    NOOP,
    Admission,
    CancelRequest,
    Command,
    CommandEffects,
    CommandResult,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Request,
    Submit,
)
from servesim.engine import Engine
from servesim.errors import CommandRejected, EngineError, EnginePoisoned
from servesim.rank import (
    CommandContext,
    GroupPassHooks,
    Handoff,
    InternalWork,
    Rank,
    RankIdentity,
    RankPass,
    RetryHint,
    SameTimestampRetry,
)
from servesim.tokens import Tokens

RETRY = RetryHint(SameTimestampRetry.RETRY)
EXHAUSTED = RetryHint(SameTimestampRetry.EXHAUSTED)
NOT_APPLICABLE = RetryHint()


def countdown(n: int) -> RetryHint:
    return RetryHint(SameTimestampRetry.COUNTDOWN, n)


class FakeRank(Rank, GroupPassHooks, Handoff, InternalWork):
    """A scripted rank: each job emits one token per pass; calls are recorded in ``log``."""

    def __init__(self, dp_rank: int = 0, dp_size: int = 1, duration_ms: float = 10.0) -> None:
        super().__init__(RankIdentity(7, dp_rank, dp_size), None, None, None)  # type: ignore[arg-type]
        self.duration_ms = duration_ms
        self.jobs: dict[int, int] = {}  # request id -> tokens still to emit
        self.blocked = False  # ready work waits on an external command
        self.report_wait_when_idle = False
        self.retry = NOT_APPLICABLE
        self.end_override: float | None = None
        self.fail_execute = False
        self.fail_complete = False
        self.fail_internal = False
        self.deadline: float | None = None
        self.idle_effects: PassCompletionEffects | None = None
        self.log: list[tuple[Any, ...]] = []
        self.waves: list[int] = []
        self.commands_seen: list[tuple[Command, CommandContext, bool]] = []

    # -- commands ----------------------------------------------------------------------

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        self.commands_seen.append((command, ctx, pending is not None))
        if isinstance(command, Submit):
            rid = command.request.request_id
            if rid in self.jobs:
                raise CommandRejected(f"request {rid} is already active")
            self.jobs[rid] = command.request.max_output_tokens
            return CommandEffects(CommandResult.submitted(rid))
        assert isinstance(command, CancelRequest)
        rid = command.request_id
        suppressed = False
        if pending is not None:
            suppressed = pending.remove_request(rid)
        if rid not in self.jobs:
            return CommandEffects(NOOP, suppressed_pending_output=suppressed)
        del self.jobs[rid]
        return CommandEffects(APPLIED, retired_requests=(rid,), suppressed_pending_output=suppressed)

    # -- readiness ---------------------------------------------------------------------

    def is_ready(self) -> bool:
        return bool(self.jobs)

    def waiting_for_external_command(self) -> bool:
        return self.blocked or (self.report_wait_when_idle and not self.jobs)

    def is_drained(self) -> bool:
        return not self.jobs and self.deadline is None

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        self.waves.append(wave_step)

    def finish_group_pass(self, any_rank_prefilled: bool, any_rank_ran_model: bool) -> None:
        self.log.append(("finish",))

    # -- passes ------------------------------------------------------------------------

    def execute_pass(self, now_ms: float) -> RankPass:
        self.log.append(("execute", now_ms))
        if self.fail_execute:
            raise RuntimeError(f"rank {self.identity.dp_rank} exploded")
        batch = OutputBatch()
        for rid in sorted(self.jobs):
            batch.token_request_ids.append(rid)
            self.jobs[rid] -= 1
            if self.jobs[rid] == 0:
                batch.completed.append(rid)
        for rid in batch.completed:
            del self.jobs[rid]
        end = now_ms + self.duration_ms if self.end_override is None else self.end_override
        start = PassStartEffects(admissions=tuple(Admission(r, 0) for r in batch.token_request_ids))
        return RankPass(end, start, batch, self.retry)

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        self.log.append(("complete", end_ms))
        if self.fail_complete:
            raise RuntimeError(f"rank {self.identity.dp_rank} failed to complete")
        return PassCompletionEffects(outputs=pending)

    def complete_idle_group_pass(
        self, started_at_ms: float, end_ms: float
    ) -> PassCompletionEffects | None:
        self.log.append(("idle", started_at_ms, end_ms))
        return self.idle_effects

    # -- internal work -----------------------------------------------------------------

    def next_internal_deadline_ms(self) -> float | None:
        return self.deadline

    def process_internal_work(self, now_ms: float, pass_in_flight: bool) -> PassStartEffects:
        self.log.append(("internal", now_ms, pass_in_flight))
        if self.fail_internal:
            raise RuntimeError("transfer bookkeeping broke")
        self.deadline = None
        return PassStartEffects()


def req(rid: int, tokens: int = 1) -> Request:
    return Request(rid, Tokens([1, 2, 3, 4]), tokens)


def make(dp_size: int, durations: tuple[float, ...] | None = None) -> tuple[Engine, list[FakeRank]]:
    durations = durations or (10.0,) * dp_size
    ranks = [FakeRank(i, dp_size, durations[i]) for i in range(dp_size)]
    return Engine(7, ranks), ranks


def run_pass(engine: Engine, now: float) -> float:
    started = engine.execute_pass(now)
    assert started is not None
    engine.complete_pass(started.pass_id, started.end_ms)
    return started.end_ms


# --------------------------------------------------------------------------- wave step


def test_wave_step_is_shared_by_every_rank_and_resets_after_drain() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1, tokens=3)), 0.0)
    engine.apply(1, Submit(req(2, tokens=1)), 0.0)
    t = 0.0
    for _ in range(3):
        t = run_pass(engine, t)
    # rank 1 drained after the first pass but is still prepared for every group pass
    assert ranks[0].waves == [0, 1, 2]
    assert ranks[1].waves == [0, 1, 2]
    assert engine.is_drained()
    engine.apply(1, Submit(req(3)), t)
    run_pass(engine, t)
    assert ranks[0].waves[-1] == 0 and ranks[1].waves[-1] == 0


def test_wave_step_resets_when_a_cancel_drains_the_group() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1, tokens=5)), 0.0)
    t = run_pass(engine, 0.0)
    t = run_pass(engine, t)
    assert ranks[0].waves == [0, 1]
    effects = engine.apply(0, CancelRequest(1), t)
    assert effects.result == APPLIED and effects.retired_requests == (1,)
    assert engine.is_drained()
    engine.apply(0, Submit(req(2)), t)
    run_pass(engine, t)
    assert ranks[0].waves == [0, 1, 0]


def test_wave_step_does_not_reset_while_a_sibling_still_owns_work() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1, tokens=5)), 0.0)
    engine.apply(1, Submit(req(2, tokens=5)), 0.0)
    t = run_pass(engine, 0.0)
    engine.apply(0, CancelRequest(1), t)
    run_pass(engine, t)
    assert ranks[0].waves == [0, 1]
    assert ranks[1].waves == [0, 1]


# --------------------------------------------------------------------------- readiness


def test_external_wait_requires_every_ready_rank() -> None:
    engine, ranks = make(3)
    engine.apply(0, Submit(req(1)), 0.0)
    engine.apply(1, Submit(req(2)), 0.0)
    ranks[0].blocked = True
    ranks[1].blocked = True
    assert engine.waiting_for_external_command()
    assert not engine.is_ready()
    # one unblocked ready rank is enough to make progress
    engine.apply(2, Submit(req(3)), 0.0)
    assert engine.is_ready()
    assert not engine.waiting_for_external_command()


def test_idle_rank_reporting_a_wait_does_not_count() -> None:
    engine, ranks = make(2)
    ranks[1].report_wait_when_idle = True
    assert not engine.waiting_for_external_command()  # no ready rank at all
    engine.apply(0, Submit(req(1)), 0.0)
    assert engine.is_ready()
    assert not engine.waiting_for_external_command()  # the only ready rank is unblocked


def test_only_unblocked_ready_ranks_execute() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1)), 0.0)
    engine.apply(1, Submit(req(2)), 0.0)
    ranks[0].blocked = True
    started = engine.execute_pass(0.0)
    assert started is not None
    assert [r.dp_rank for r in started.by_rank] == [1]
    assert ("execute", 0.0) not in ranks[0].log
    done = engine.complete_pass(started.pass_id, started.end_ms)
    assert ("idle", 0.0, 10.0) in ranks[0].log  # the blocked rank is held by the barrier
    assert [rc.dp_rank for rc in done.by_rank] == [1]
    assert not engine.is_ready()
    assert engine.waiting_for_external_command()
    assert engine.execute_pass(10.0) is None


# --------------------------------------------------------------------------- single rank


def test_single_rank_uses_the_generalized_contract() -> None:
    engine, ranks = make(1, (7.5,))
    assert engine.execute_pass(0.0) is None  # idle: no pass id consumed
    engine.apply(0, Submit(req(1, tokens=2)), 5.0)
    started = engine.execute_pass(5.0)
    assert started is not None
    assert started.pass_id == 0
    assert started.started_at_ms == 5.0
    assert started.end_ms == 12.5
    assert started.participating_ranks == 1
    assert [(r.dp_rank, r.rank_end_ms) for r in started.by_rank] == [(0, 12.5)]
    assert started.by_rank[0].effects.admissions == (Admission(1, 0),)
    assert not engine.is_ready() and not engine.is_drained() and engine.pass_in_flight
    with pytest.raises(EngineError, match="already in flight"):
        engine.execute_pass(6.0)
    done = engine.complete_pass(0, 12.5)
    assert done.pass_id == 0 and done.end_ms == 12.5
    assert done.by_rank[0].effects.outputs.token_request_ids == [1]
    second = engine.execute_pass(12.5)
    assert second is not None and second.pass_id == 1 and second.end_ms == 20.0
    done = engine.complete_pass(1, 20.0)
    assert done.by_rank[0].effects.outputs.completed == [1]
    assert engine.is_drained()
    with pytest.raises(EngineError, match="no pass in flight"):
        engine.complete_pass(2, 20.0)


# --------------------------------------------------------------------------- retry hints


def _hints_engine(hints: list[RetryHint]) -> RetryHint:
    engine, ranks = make(len(hints), (0.0,) * len(hints))
    for i, hint in enumerate(hints):
        ranks[i].retry = hint
        engine.apply(i, Submit(req(i)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    return started.retry


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        ([NOT_APPLICABLE, RETRY, EXHAUSTED], RETRY),
        ([EXHAUSTED, RETRY], RETRY),
        ([NOT_APPLICABLE, EXHAUSTED], EXHAUSTED),
        ([EXHAUSTED, NOT_APPLICABLE], EXHAUSTED),
        ([NOT_APPLICABLE, NOT_APPLICABLE], NOT_APPLICABLE),
        ([RETRY, countdown(2)], countdown(2)),
        ([countdown(3), EXHAUSTED], countdown(3)),
        ([countdown(1), countdown(4), countdown(2)], countdown(4)),
    ],
)
def test_group_aggregates_same_timestamp_retry_hints(
    hints: list[RetryHint], expected: RetryHint
) -> None:
    assert _hints_engine(hints) == expected


def test_retry_hint_of_an_idle_rank_is_ignored() -> None:
    engine, ranks = make(2, (0.0, 0.0))
    ranks[1].retry = RETRY  # never executes
    engine.apply(0, Submit(req(1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None and started.retry == NOT_APPLICABLE


class ConvergingRank(FakeRank):
    """Hidden zero-duration rounds report Retry until the work becomes visible."""

    def __init__(self, hidden_rounds: int) -> None:
        super().__init__(0, 1, 0.0)
        self.hidden = hidden_rounds

    def execute_pass(self, now_ms: float) -> RankPass:
        if self.hidden:
            self.hidden -= 1
            return RankPass(now_ms, PassStartEffects(), OutputBatch(), RETRY)
        return super().execute_pass(now_ms)


def test_same_timestamp_retry_reaches_a_visible_effect_without_advancing_time() -> None:
    rank = ConvergingRank(3)
    engine = Engine(7, [rank])
    engine.apply(0, Submit(req(1)), 42.0)
    seen = []
    while True:
        started = engine.execute_pass(42.0)
        assert started is not None
        done = engine.complete_pass(started.pass_id, started.end_ms)
        seen.append((started.end_ms, started.retry.kind, started.by_rank[0].effects.admissions))
        if started.by_rank[0].effects.admissions:
            break
    assert [s[0] for s in seen] == [42.0] * 4
    assert [s[1] for s in seen[:3]] == [SameTimestampRetry.RETRY] * 3
    assert seen[3][2] == (Admission(1, 0),)
    assert done.by_rank[0].effects.outputs.completed == [1]


# --------------------------------------------------------------------------- boundaries


def test_slowest_rank_boundary_holds_idle_siblings() -> None:
    engine, ranks = make(3, (5.0, 20.0, 1.0))
    engine.apply(0, Submit(req(1)), 100.0)
    engine.apply(1, Submit(req(2)), 100.0)
    started = engine.execute_pass(100.0)
    assert started is not None
    assert started.end_ms == 120.0
    assert started.participating_ranks == 3
    assert [(r.dp_rank, r.rank_end_ms) for r in started.by_rank] == [(0, 105.0), (1, 120.0)]
    # a command to the idle sibling mid-pass sees the group-wide in-flight flag
    ranks[2].idle_effects = PassCompletionEffects()
    engine.apply(2, Submit(req(3)), 110.0)
    cmd, ctx, had_pending = ranks[2].commands_seen[-1]
    assert ctx == CommandContext(110.0, True) and not ctx.allow_immediate_admission
    assert not had_pending
    assert not engine.is_ready()
    with pytest.raises(EngineError, match="before the modelled end"):
        engine.complete_pass(started.pass_id, 119.0)
    with pytest.raises(EngineError, match="does not match"):
        engine.complete_pass(started.pass_id + 1, 120.0)
    assert engine.pass_in_flight  # the wrong id consumed nothing
    done = engine.complete_pass(started.pass_id, 125.0)  # a late driver is accepted
    assert done.end_ms == 120.0
    assert ("complete", 120.0) in ranks[0].log
    assert ("complete", 120.0) in ranks[1].log
    assert ("idle", 100.0, 120.0) in ranks[2].log
    assert [rc.dp_rank for rc in done.by_rank] == [0, 1, 2]
    assert engine.is_ready()  # the sibling's mid-pass submit runs next


def test_idle_sibling_without_boundary_effects_is_left_out() -> None:
    engine, ranks = make(2)
    engine.apply(1, Submit(req(1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    done = engine.complete_pass(started.pass_id, started.end_ms)
    assert ("idle", 0.0, 10.0) in ranks[0].log
    assert [rc.dp_rank for rc in done.by_rank] == [1]


# --------------------------------------------------------------------------- cancellation


def test_single_rank_cancellation_suppresses_already_computed_output() -> None:
    engine, ranks = make(1)
    engine.apply(0, Submit(req(1, tokens=1)), 0.0)
    engine.apply(0, Submit(req(2, tokens=1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    effects = engine.apply(0, CancelRequest(1), 4.0)
    assert effects.suppressed_pending_output
    assert ranks[0].commands_seen[-1][2]  # the rank received its retained pass
    done = engine.complete_pass(started.pass_id, started.end_ms)
    outputs = done.by_rank[0].effects.outputs
    assert outputs.token_request_ids == [2]
    assert outputs.completed == [2]


def test_cancellation_mutates_only_the_target_ranks_retained_pass() -> None:
    engine, _ = make(2)
    engine.apply(0, Submit(req(1)), 0.0)
    engine.apply(1, Submit(req(1)), 0.0)  # same id on another rank: independent state
    started = engine.execute_pass(0.0)
    assert started is not None
    engine.apply(0, CancelRequest(1, discard_pending_output=True), 3.0)
    done = engine.complete_pass(started.pass_id, started.end_ms)
    by_rank = {rc.dp_rank: rc.effects.outputs for rc in done.by_rank}
    assert by_rank[0].token_request_ids == [] and by_rank[0].completed == []
    assert by_rank[1].token_request_ids == [1] and by_rank[1].completed == [1]


# --------------------------------------------------------------------------- internal work


def test_internal_work_waits_for_the_group_pass_boundary() -> None:
    engine, ranks = make(2)
    ranks[0].deadline = 5.0
    ranks[1].deadline = 8.0
    assert engine.next_internal_deadline_ms() == 5.0
    engine.apply(0, Submit(req(1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    assert engine.next_internal_deadline_ms() is None  # masked while in flight
    assert engine.process_internal_work(9.0) == []
    # a command after the deadline is accepted mid-pass and settles nothing
    engine.apply(1, Submit(req(2)), 9.0)
    assert not any(entry[0] == "internal" for r in ranks for entry in r.log)
    engine.complete_pass(started.pass_id, started.end_ms)
    assert engine.next_internal_deadline_ms() == 5.0
    out = engine.process_internal_work(10.0)
    assert [i for i, _ in out] == [0, 1]
    assert ("internal", 10.0, False) in ranks[0].log
    assert ("internal", 10.0, False) in ranks[1].log
    assert engine.next_internal_deadline_ms() is None


def test_internal_work_processes_only_due_ranks() -> None:
    engine, ranks = make(2)
    ranks[0].deadline = 5.0
    ranks[1].deadline = 50.0
    out = engine.process_internal_work(6.0)
    assert [i for i, _ in out] == [0]
    assert not any(entry[0] == "internal" for entry in ranks[1].log)
    assert engine.next_internal_deadline_ms() == 50.0


def test_overdue_internal_work_blocks_commands_until_processed() -> None:
    engine, ranks = make(1)
    ranks[0].deadline = 5.0
    with pytest.raises(EngineError, match="process internal work and retry"):
        engine.apply(0, Submit(req(1)), 10.0)
    assert ranks[0].commands_seen == []  # never reached the rank
    assert engine.poisoned is None
    engine.process_internal_work(10.0)
    assert engine.apply(0, Submit(req(1)), 10.0).result == CommandResult.submitted(1)


def test_command_at_a_future_deadline_is_allowed() -> None:
    engine, ranks = make(1)
    ranks[0].deadline = 5.0
    engine.apply(0, Submit(req(1)), 4.999)
    assert len(ranks[0].commands_seen) == 1


# --------------------------------------------------------------------------- poisoning


def _assert_poisoned(engine: Engine) -> None:
    assert engine.poisoned is not None
    assert not engine.is_ready()
    assert not engine.waiting_for_external_command()
    assert engine.next_internal_deadline_ms() is None
    assert not engine.is_drained()
    for call in (
        lambda: engine.apply(0, Submit(req(99)), 50.0),
        lambda: engine.execute_pass(50.0),
        lambda: engine.complete_pass(0, 50.0),
        lambda: engine.process_internal_work(50.0),
    ):
        with pytest.raises(EnginePoisoned, match="is poisoned"):
            call()


def test_execute_failure_after_an_earlier_rank_commits_poisons() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1)), 0.0)
    engine.apply(1, Submit(req(2)), 0.0)
    ranks[1].fail_execute = True
    ranks[1].deadline = 30.0
    with pytest.raises(EnginePoisoned, match="now poisoned") as info:
        engine.execute_pass(0.0)
    assert "rank 1 exploded" in str(info.value)
    assert ("execute", 0.0) in ranks[0].log  # rank 0 had already committed
    _assert_poisoned(engine)


def test_a_failure_without_a_message_is_named_by_its_type() -> None:
    """MemoryError() has no text: the poisoning names its type instead of ending in ': '."""

    class Starved(FakeRank):
        def execute_pass(self, now_ms: float) -> Any:
            raise MemoryError()

    engine = Engine(7, [Starved(0, 1, 10.0)])
    engine.apply(0, Submit(req(1)), 0.0)
    with pytest.raises(EnginePoisoned) as info:
        engine.execute_pass(0.0)
    assert str(info.value) == "engine 7 is now poisoned: execute_pass on rank 0 failed: MemoryError"


@pytest.mark.parametrize("bad_end", [9.0, float("nan"), float("inf")])
def test_rank_returning_an_invalid_end_poisons(bad_end: float) -> None:
    engine, ranks = make(1)
    engine.apply(0, Submit(req(1)), 10.0)
    ranks[0].end_override = bad_end
    with pytest.raises(EnginePoisoned, match="now poisoned"):
        engine.execute_pass(10.0)
    _assert_poisoned(engine)


def test_completion_failure_after_an_earlier_rank_completes_poisons() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1)), 0.0)
    engine.apply(1, Submit(req(2)), 0.0)
    ranks[1].fail_complete = True
    started = engine.execute_pass(0.0)
    assert started is not None
    with pytest.raises(EnginePoisoned, match="now poisoned") as info:
        engine.complete_pass(started.pass_id, started.end_ms)
    assert "failed to complete" in str(info.value)
    assert ("complete", 10.0) in ranks[0].log
    assert all(r.is_drained() for r in ranks)  # every rank looks drained ...
    _assert_poisoned(engine)  # ... but poisoning prevents a false "drained"


def test_internal_work_failure_poisons_after_due_ranks_may_mutate() -> None:
    engine, ranks = make(2)
    ranks[0].deadline = 1.0
    ranks[1].deadline = 2.0
    ranks[1].fail_internal = True
    with pytest.raises(EnginePoisoned, match="now poisoned") as info:
        engine.process_internal_work(3.0)
    assert "transfer bookkeeping broke" in str(info.value)
    assert ranks[0].deadline is None  # rank 0 already settled its work
    _assert_poisoned(engine)


def test_targeted_command_rejection_does_not_poison() -> None:
    engine, ranks = make(2)
    engine.apply(0, Submit(req(1, tokens=2)), 0.0)
    with pytest.raises(CommandRejected, match="already active"):
        engine.apply(0, Submit(req(1, tokens=9)), 0.0)
    assert engine.poisoned is None
    assert ranks[0].jobs == {1: 2}  # unchanged by the rejected command
    t = run_pass(engine, 0.0)
    t = run_pass(engine, t)
    assert t == 20.0
    assert engine.is_drained()


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [float("nan"), -1.0, -0.001, float("inf"), float("-inf")])
def test_non_finite_or_negative_times_are_rejected_without_poisoning(bad: float) -> None:
    engine, ranks = make(2)
    with pytest.raises(ValueError, match="finite and >= 0"):
        engine.apply(0, Submit(req(1)), bad)
    with pytest.raises(ValueError, match="finite and >= 0"):
        engine.execute_pass(bad)
    with pytest.raises(ValueError, match="finite and >= 0"):
        engine.process_internal_work(bad)
    engine.apply(0, Submit(req(1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    with pytest.raises(ValueError, match="finite and >= 0"):
        engine.complete_pass(started.pass_id, bad)
    assert engine.poisoned is None and engine.pass_in_flight
    done = engine.complete_pass(started.pass_id, started.end_ms)
    assert done.by_rank[0].effects.outputs.completed == [1]
    assert ranks[0].commands_seen[0][1] == CommandContext(0.0, False)


@pytest.mark.parametrize("dp_rank", [2, 3, -1])
def test_out_of_range_rank_is_rejected_without_poisoning(dp_rank: int) -> None:
    engine, ranks = make(2)
    with pytest.raises(EngineError, match="out of range"):
        engine.apply(dp_rank, Submit(req(1)), 0.0)
    assert engine.poisoned is None
    assert all(r.commands_seen == [] for r in ranks)
    assert engine.apply(1, Submit(req(1)), 0.0).result == CommandResult.submitted(1)


def test_build_names_the_failing_rank() -> None:
    def make_rank(identity: RankIdentity) -> Rank:
        if identity.dp_rank == 1:
            raise ValueError("no memory")
        return FakeRank(identity.dp_rank, identity.dp_size)

    with pytest.raises(EngineError, match="building rank 1 of worker 3: no memory"):
        Engine.build(3, 2, make_rank)
    engine = Engine.build(3, 2, lambda ident: FakeRank(ident.dp_rank, ident.dp_size))
    assert engine.dp_size == 2
    assert [r.identity.dp_rank for r in engine.ranks] == [0, 1]


class FinishFailsRank(FakeRank):
    def finish_group_pass(self, any_rank_prefilled: bool, any_rank_ran_model: bool) -> None:
        raise RuntimeError("group bookkeeping broke")


class PrepareFailsRank(FakeRank):
    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        raise RuntimeError("cannot reset pass flags")


def test_prepare_group_pass_failure_poisons() -> None:
    """Siblings prepared before the failing rank already reset their per-pass state."""
    ranks = [FakeRank(0, 2), PrepareFailsRank(1, 2)]
    engine = Engine(7, ranks)
    engine.apply(0, Submit(req(1)), 0.0)
    with pytest.raises(EnginePoisoned, match="now poisoned.*cannot reset pass flags"):
        engine.execute_pass(0.0)
    assert ranks[0].waves == [0] and ("execute", 0.0) not in ranks[0].log
    _assert_poisoned(engine)


def test_finish_group_pass_failure_after_ranks_committed_poisons() -> None:
    """servesim hardening: a rank that fails in finish_group_pass after siblings executed
    would otherwise lose the committed pass without any trace."""
    ranks = [FakeRank(0, 2), FinishFailsRank(1, 2)]
    engine = Engine(7, ranks)
    engine.apply(0, Submit(req(1)), 0.0)
    with pytest.raises(EnginePoisoned, match="now poisoned.*group bookkeeping broke"):
        engine.execute_pass(0.0)
    assert ("execute", 0.0) in ranks[0].log
    _assert_poisoned(engine)
