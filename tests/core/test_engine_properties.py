"""Property test of the Engine's group-pass invariants (aisimulate-engine.md §2.4) over random
DP sizes, rank speeds and arrival patterns."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import (
    CommandEffects,
    CommandResult,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Request,
    Submit,
)
from servesim.engine import Engine
from servesim.rank import CommandContext, GroupPassHooks, Rank, RankIdentity, RankPass
from servesim.tokens import Tokens


class CountingRank(Rank, GroupPassHooks):
    """One token per job per pass; pass length is ``ms_per_job`` × jobs (0 allowed)."""

    def __init__(self, dp_rank: int, dp_size: int, ms_per_job: float) -> None:
        super().__init__(RankIdentity(0, dp_rank, dp_size), None, None, None)  # type: ignore[arg-type]
        self.ms_per_job = ms_per_job
        self.jobs: dict[int, int] = {}
        self.waves: list[int] = []
        self.completed_at: list[float] = []

    def apply(self, command: Any, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        self.jobs[command.request.request_id] = command.request.max_output_tokens
        return CommandEffects(CommandResult.submitted(command.request.request_id))

    def is_ready(self) -> bool:
        return bool(self.jobs)

    def is_drained(self) -> bool:
        return not self.jobs

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        self.waves.append(wave_step)

    def execute_pass(self, now_ms: float) -> RankPass:
        batch = OutputBatch()
        for rid in sorted(self.jobs):
            batch.token_request_ids.append(rid)
            self.jobs[rid] -= 1
            if not self.jobs[rid]:
                batch.completed.append(rid)
                del self.jobs[rid]
        return RankPass(now_ms + self.ms_per_job * len(batch.token_request_ids), PassStartEffects(), batch)

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        self.completed_at.append(end_ms)
        return PassCompletionEffects(outputs=pending)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    speeds=st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=1, max_size=4),
    jobs=st.lists(
        st.tuples(st.floats(0, 30, allow_nan=False), st.integers(0, 3), st.integers(1, 4)),
        min_size=1,
        max_size=12,
    ),
)
def test_group_passes_share_the_slowest_boundary(speeds: list[float], jobs: list[tuple]) -> None:
    dp = len(speeds)
    ranks = [CountingRank(i, dp, s) for i, s in enumerate(speeds)]
    engine = Engine(0, ranks)
    arrivals = sorted((at, i, rank % dp, n) for i, (at, rank, n) in enumerate(jobs))
    tokens: dict[int, int] = {}
    now, k, pass_ids, boundaries = 0.0, 0, [], []
    while True:
        while k < len(arrivals) and arrivals[k][0] <= now:
            _, rid, rank, n = arrivals[k]
            engine.apply(rank, Submit(Request(rid, Tokens([1]), n)), now)
            k += 1
        started = engine.execute_pass(now)
        if started is None:
            if k == len(arrivals):
                break
            now = arrivals[k][0]
            continue
        pass_ids.append(started.pass_id)
        boundaries.append(started.end_ms)
        ends = [r.rank_end_ms for r in started.by_rank]
        assert started.end_ms == max([now, *ends])
        assert started.participating_ranks == dp
        assert len({r.waves[-1] for r in ranks}) == 1  # every rank saw the same wave step
        done = engine.complete_pass(started.pass_id, started.end_ms + 0.25)  # a late driver
        assert done.end_ms == started.end_ms
        for rc in done.by_rank:
            tokens_in = rc.effects.outputs.token_request_ids
            for rid in tokens_in:
                tokens[rid] = tokens.get(rid, 0) + 1
        now = started.end_ms
    assert pass_ids == list(range(len(pass_ids)))
    assert tokens == {rid: n for _, rid, _, n in arrivals}
    # ranks complete at the modelled boundaries, never at the driver's late time
    assert all(set(r.completed_at) <= set(boundaries) for r in ranks)
    assert engine.is_drained()


@settings(max_examples=30, derandomize=True, deadline=None)
@given(bursts=st.lists(st.integers(1, 3), min_size=1, max_size=5), dp=st.integers(1, 3))
def test_wave_step_restarts_at_zero_after_every_drain(bursts: list[int], dp: int) -> None:
    ranks = [CountingRank(i, dp, 1.0) for i in range(dp)]
    engine = Engine(0, ranks)
    now, rid = 0.0, 0
    for length in bursts:
        engine.apply(rid % dp, Submit(Request(rid, Tokens([1]), length)), now)
        rid += 1
        waves = []
        while (started := engine.execute_pass(now)) is not None:
            waves.append(ranks[0].waves[-1])
            now = engine.complete_pass(started.pass_id, started.end_ms).end_ms
        assert waves == list(range(length))
        assert engine.is_drained()
