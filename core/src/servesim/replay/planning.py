"""Planners: plugins that resize the cluster's pools while a replay runs.

A planner is registered with ``servesim_register_planners`` and chosen by ``planner: {type:
NAME, interval_s: S, ...options}``. The driver (servesim.replay.elastic) calls
:meth:`Planner.tick` at simulated time 0 and then every ``interval_s`` (or at the
``next_tick_ms`` a decision asks for) with a :class:`PlannerSnapshot`: per pool the workers
by state, queue lengths and tokens, KV utilisation (per pool and per serving worker), the
TTFT/ITL percentiles and throughput of the requests that finished since the last tick, the
forward-pass metrics of the passes that ended since then, and the traffic window (requests
that arrived since the last tick, with their mean input and output lengths). The planner
answers with a :class:`PlannerDecision`: target worker counts per pool and/or add/remove
:class:`ScaleAction` entries. Targets count the workers that are starting, warming up or
ready; the driver clamps them to ``lifecycle.min_workers``/``max_workers``.

Built in: ``static`` (keeps the initial sizes, or ``workers`` per pool) and ``schedule``
(scripted counts at given times).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from attrs import field, frozen

from servesim.contract import ForwardPassMetrics


@frozen
class Percentiles:
    """p50/p90/p99 of a sample (nearest rank; zeros and ``count`` 0 when empty)."""

    count: int = 0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0


@frozen
class WorkerSnapshot:
    """One serving worker (ready, warming up or draining) at a tick: ``kv_utilization`` and
    ``queue_length`` (waiting requests) at its last pass, and their peaks over the passes
    that ended since the last tick (the last values when none did); ``ready_ms`` is its last
    start of service."""

    worker: int
    state: str
    kv_utilization: float
    queue_length: int
    peak_kv_utilization: float
    peak_queue_length: int
    ready_ms: float = -1.0


@frozen
class PoolSnapshot:
    """One pool at a tick (see the module docs). ``kv_utilization`` is the mean device-KV
    occupancy of its ready workers at their last pass; ``queued_requests`` counts requests
    waiting in its engines' queues (last pass) plus those the front end holds for want of a
    ready worker (cluster-wide, counted in every pool); ``queued_tokens`` the prompt tokens
    routed to it and not yet prefilled."""

    name: str
    starting: int
    warmup: int
    ready: int
    draining: int
    restarting: int
    queued_requests: int
    queued_tokens: int
    running_requests: int
    kv_utilization: float
    ttft_ms: Percentiles
    itl_ms: Percentiles
    completed: int
    output_tokens_per_s: float
    request_throughput: float
    passes: tuple[ForwardPassMetrics, ...] = ()
    workers: tuple[WorkerSnapshot, ...] = ()
    #: When each of ``passes`` ended (ms; empty when not recorded).
    pass_end_ms: tuple[float, ...] = ()
    #: Ids of the workers still starting (or restarting).
    starting_ids: tuple[int, ...] = ()

    @property
    def active(self) -> int:
        """Workers a target counts: starting, warming up or ready."""
        return self.starting + self.warmup + self.ready


@frozen
class TrafficWindow:
    """Requests that arrived since the last tick and their mean input/output lengths."""

    requests: int = 0
    mean_isl: float = 0.0
    mean_osl: float = 0.0


@frozen
class PlannerSnapshot:
    """What a planner sees at simulated time ``now_ms`` (``since_ms``: the previous tick)."""

    now_ms: float
    since_ms: float
    pools: tuple[PoolSnapshot, ...]
    traffic: TrafficWindow

    def pool(self, name: str) -> PoolSnapshot:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)


@frozen
class ScaleAction:
    """Add ``delta`` workers to ``pool`` (negative: remove that many)."""

    pool: str
    delta: int
    reason: str = ""


@frozen
class PlannerDecision:
    """Target counts per pool and/or actions; ``reason`` labels the scaling actions it causes;
    ``next_tick_ms`` asks for the next tick then (None: after ``interval_s``)."""

    targets: Mapping[str, int] = field(factory=dict)
    actions: tuple[ScaleAction, ...] = ()
    reason: str = ""
    next_tick_ms: float | None = None


class Planner(ABC):
    """Base of planners: ``config_class`` structures the options of ``planner:`` (less
    ``type`` and ``interval_s``). Built per run with the pools' names and initial sizes."""

    config_class: ClassVar[type | None] = None

    def __init__(self, config: Any, pools: Mapping[str, int], interval_s: float) -> None:
        self.config = config
        self.pools = dict(pools)
        self.interval_s = interval_s

    @abstractmethod
    def tick(self, snapshot: PlannerSnapshot) -> PlannerDecision | None:
        """The decision at ``snapshot.now_ms`` (None: no change)."""

    def finish(self) -> Mapping[str, Any] | None:
        """After the replay: report keys of the planner's own (``elastic.planner``), or None."""
        return None


@frozen(kw_only=True)
class StaticConfig:
    """``workers``: pool name -> count (pools not named keep their initial size)."""

    workers: dict[str, int] = field(factory=dict)


class StaticPlanner(Planner):
    """Holds every pool at a fixed size (its initial size unless ``workers`` names it)."""

    config_class = StaticConfig

    def tick(self, snapshot: PlannerSnapshot) -> PlannerDecision | None:
        cfg = self.config or StaticConfig()
        targets = {name: cfg.workers.get(name, n) for name, n in self.pools.items()}
        return PlannerDecision(targets=targets, reason="static")


@frozen(kw_only=True)
class ScheduleStep:
    """From ``at_s`` on, pool ``pool`` (null: the only pool) has ``workers`` workers."""

    at_s: float
    workers: int
    pool: str | None = None


@frozen(kw_only=True)
class ScheduleConfig:
    steps: tuple[ScheduleStep, ...] = ()


class SchedulePlanner(Planner):
    """Scripted sizes: each step sets its pool's target at its time (ticks are placed on the
    step times, so ``interval_s`` does not delay a step)."""

    config_class = ScheduleConfig

    def __init__(self, config: Any, pools: Mapping[str, int], interval_s: float) -> None:
        super().__init__(config or ScheduleConfig(), pools, interval_s)
        names = list(self.pools)
        self.steps = sorted(((s.at_s * 1000.0, i, s) for i, s in enumerate(self.config.steps)),
                            key=lambda t: (t[0], t[1]))
        for _, i, s in self.steps:
            if s.pool is None and len(names) != 1:
                raise ValueError(f"steps[{i}].pool is required with several pools ({', '.join(names)})")
            if s.pool is not None and s.pool not in self.pools:
                raise ValueError(f"steps[{i}].pool {s.pool!r} is not a pool ({', '.join(names)})")
            if s.workers < 0:
                raise ValueError(f"steps[{i}].workers must be >= 0, got {s.workers}")
        self.next = 0

    def tick(self, snapshot: PlannerSnapshot) -> PlannerDecision | None:
        targets: dict[str, int] = {}
        only = next(iter(self.pools))
        while self.next < len(self.steps) and self.steps[self.next][0] <= snapshot.now_ms:
            s = self.steps[self.next][2]
            targets[s.pool or only] = s.workers
            self.next += 1
        nxt = self.steps[self.next][0] if self.next < len(self.steps) else None
        return PlannerDecision(targets=targets, reason="schedule", next_tick_ms=nxt)


def percentiles(values: Sequence[float]) -> Percentiles:
    """:class:`Percentiles` of ``values`` (the report's nearest-rank definition)."""
    from servesim.report.percentiles import percentile

    if not values:
        return Percentiles()
    vals = sorted(values)
    return Percentiles(len(vals), percentile(vals, 50.0), percentile(vals, 90.0),
                       percentile(vals, 99.0))


__all__ = [
    "Percentiles", "Planner", "PlannerDecision", "PlannerSnapshot", "PoolSnapshot",
    "ScaleAction", "ScheduleConfig", "SchedulePlanner", "ScheduleStep", "StaticConfig",
    "StaticPlanner", "TrafficWindow", "WorkerSnapshot", "percentiles",
]
