"""Worker lifecycle records of an elastic cluster (servesim.replay.elastic).

A worker added to a pool is ``starting`` for ``lifecycle.startup_s``, then ``warmup`` (its
passes take ``warmup.factor`` times their modelled time) for ``warmup.duration_s``, then
``ready``. Only ready workers are routed to. A removed worker is ``draining`` until it holds
no request (``wait``, ``redirect``) and then ``stopped``; with ``immediate`` it stops at once.
A crashed worker is ``restarting`` for ``faults.restart_s`` and then starts again from
``starting`` with a fresh engine. A worker's GPUs count from its addition to its stop.
"""

from __future__ import annotations

import enum

from attrs import define, field, frozen


class WorkerState(enum.Enum):
    STARTING = "starting"
    WARMUP = "warmup"
    READY = "ready"
    DRAINING = "draining"
    RESTARTING = "restarting"
    STOPPED = "stopped"


#: States a pool's target counts (and a planner's ``active``).
ACTIVE = (WorkerState.STARTING, WorkerState.WARMUP, WorkerState.READY)


@define
class WorkerRecord:
    """One worker's lifecycle: its pool (index), state, and times in simulated ms."""

    worker: int
    pool: int
    state: WorkerState
    added_ms: float
    stopped_ms: float = -1.0
    ready_ms: float = -1.0
    # Bumped at every (re)start so that a start-up event of an earlier incarnation is ignored.
    epoch: int = 0
    crashes: int = 0
    #: ``(t_ms, state)`` at the worker's addition and at every change of state since.
    history: list[tuple[float, str]] = field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.history.append((self.added_ms, self.state.value))

    def enter(self, state: WorkerState, now: float) -> None:
        """Move to ``state`` at ``now``, recording the change (none when already there)."""
        if state is not self.state:
            self.state = state
            self.history.append((now, state.value))


@frozen
class PoolRuntime:
    """A pool while the replay runs: its name, the factory that builds its workers' engines
    (``build(worker_id)``) and GPUs per worker."""

    name: str
    factory: object
    gpus_per_worker: int
    initial: int


@define
class ScalingLog:
    """The scaling actions (``t_ms``, pool, ``add``/``remove``, worker, reason), in order,
    and the state transitions the report counts."""

    actions: list[dict[str, object]] = field(factory=list)

    def add(self, t_ms: float, pool: str, action: str, worker: int, reason: str) -> None:
        self.actions.append({"t_ms": t_ms, "pool": pool, "action": action, "worker": worker,
                             "reason": reason})


def gpu_seconds(rec: WorkerRecord, end_ms: float, gpus: int) -> float:
    """GPU-seconds ``rec`` held from its addition to its stop (or ``end_ms``)."""
    stop = rec.stopped_ms if rec.stopped_ms >= 0 else end_ms
    return max(stop - rec.added_ms, 0.0) / 1000.0 * gpus
