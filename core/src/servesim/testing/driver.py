"""A minimal single-engine driver for tests and the conformance kit.

It follows the canonical loop of aisimulate-engine.md §12 for one engine: deliver due
arrivals, start a pass when the engine is ready, complete it at its modelled end, repeat.
The full multi-worker Replayer lives in :mod:`servesim.replay`; this one is small on purpose
so a backend author can read it in one sitting and trust what their tests see.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import define, field

from servesim.contract import Command, CommandEffects, Request, Submit
from servesim.engine import Engine, EnginePassCompleted, EnginePassStarted
from servesim.fast.engine_runs import RunEngine
from servesim.fast.runs import EngineRunCompleted


@define
class RequestTrace:
    """What one request saw: arrival, every token time, completion, rejection."""

    request_id: int
    arrival_ms: float
    token_times: list[float] = field(factory=list)
    completed_ms: float | None = None
    rejected: bool = False
    cached_tokens: int | None = None
    dp_rank: int = 0

    @property
    def first_token_ms(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def ttft_ms(self) -> float | None:
        t = self.first_token_ms
        return None if t is None else t - self.arrival_ms


@define
class DriveResult:
    requests: dict[int, RequestTrace]
    passes: list[EnginePassStarted]
    completions: list[EnginePassCompleted]
    command_effects: list[CommandEffects]
    end_ms: float
    runs: list[EngineRunCompleted] = field(factory=list)


def drive(
    engine: Engine,
    arrivals: Iterable[tuple[float, Request] | tuple[float, Request, int]],
    *,
    max_passes: int = 1_000_000,
    extra_commands: Iterable[tuple[float, int, Command]] = (),
    runs: bool = False,
    through_completions: bool = False,
) -> DriveResult:
    """Run ``engine`` over ``(arrival_ms, request[, dp_rank])`` until every request finishes.

    ``extra_commands`` are ``(at_ms, dp_rank, command)`` delivered at their time (e.g. a
    ``CancelRequest``). Raises RuntimeError if the engine stops making progress.

    With ``runs`` the engine (a :class:`~servesim.fast.engine_runs.RunEngine`, as a factory
    the speed overlay fitted builds) may commit runs of passes (servesim.fast.runs) up to the next event;
    ``passes``/``completions`` then hold only stepped passes, ``runs`` the released runs.
    ``through_completions`` lets runs continue through completions (nothing here reacts to
    a completion before the next event).
    """
    runner: RunEngine | None = None
    if runs:
        if not isinstance(engine, RunEngine):
            raise TypeError("drive(runs=True) needs a RunEngine (servesim.fast.engine_runs)")
        runner = engine
    events: list[tuple[float, int, int, Command]] = []
    traces: dict[int, RequestTrace] = {}
    for seq, item in enumerate(arrivals):
        at, req = item[0], item[1]
        rank = item[2] if len(item) > 2 else 0  # type: ignore[misc]
        traces[req.request_id] = RequestTrace(req.request_id, at, dp_rank=rank)
        events.append((at, seq, rank, Submit(req)))
    base = len(events)
    for k, (at, rank, cmd) in enumerate(extra_commands):
        events.append((at, base + k, rank, cmd))
    events.sort(key=lambda e: (e[0], e[1]))
    result = DriveResult(traces, [], [], [], 0.0)
    now = 0.0
    i = 0
    for _ in range(max_passes):
        while i < len(events) and events[i][0] <= now:
            _, _, rank, cmd = events[i]
            result.command_effects.append(engine.apply(rank, cmd, now))
            i += 1
        if runner is not None and engine.is_ready():
            horizon = events[i][0] if i < len(events) else float("inf")
            run = runner.execute_run(now, horizon, through_completions=through_completions)
            if run is not None:
                i = _deliver_mid(engine, events, i, run.end_ms, run.pass_ends[-2]
                                 if run.num_passes > 1 else now, result)
                now = run.end_ms
                done_run = runner.complete_run(run.first_pass_id, now)
                result.runs.append(done_run)
                _record_run(done_run, traces)
                continue
        started = engine.execute_pass(now) if engine.is_ready() else None
        if started is None:
            if i < len(events):
                now = max(now, events[i][0])
                continue
            if engine.is_drained():
                result.end_ms = now
                return result
            raise RuntimeError(f"engine stalled at {now} ms with work left and no event")
        result.passes.append(started)
        # Commands due before the pass ends are delivered mid-pass, as a real driver would.
        while i < len(events) and events[i][0] < started.end_ms:
            at, _, rank, cmd = events[i]
            result.command_effects.append(engine.apply(rank, cmd, max(at, now)))
            i += 1
        now = started.end_ms
        done = engine.complete_pass(started.pass_id, now)
        result.completions.append(done)
        _record(done, traces, now)
    raise RuntimeError(f"no drain after {max_passes} passes")


def _deliver_mid(engine: Engine, events: list[tuple[float, int, int, Command]], i: int,
                 end_ms: float, start_ms: float, result: DriveResult) -> int:
    while i < len(events) and events[i][0] < end_ms:
        at, _, rank, cmd = events[i]
        result.command_effects.append(engine.apply(rank, cmd, max(at, start_ms)))
        i += 1
    return i


def _record_run(done: EngineRunCompleted, traces: dict[int, RequestTrace]) -> None:
    eff = done.effects
    ends = eff.pass_ends
    absent = set(eff.absent_last)
    stop = {rid: j for j, rids in eff.completed_before.items() for rid in rids}
    for rid in eff.members:
        j = stop.get(rid)
        if j is not None:
            traces[rid].token_times.extend(ends[: j + 1])
            traces[rid].completed_ms = ends[j]
        else:
            traces[rid].token_times.extend(ends[:-1] if rid in absent else ends)
    for rid in eff.completed:
        traces[rid].completed_ms = ends[-1]


def _record(done: EnginePassCompleted, traces: dict[int, RequestTrace], now: float) -> None:
    for rc in done.by_rank:
        batch = rc.effects.outputs
        for rid in batch.token_request_ids:
            traces[rid].token_times.append(now)
        for rid, cached in batch.cached_tokens.items():
            if traces[rid].cached_tokens is None:
                traces[rid].cached_tokens = cached
        for rid in batch.completed:
            traces[rid].completed_ms = now
        for rid in batch.rejected:
            traces[rid].rejected = True
