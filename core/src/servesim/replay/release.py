"""Releasing turns that wait for requests of other sessions (an agentic trace's dependency
graph: ``Turn.wait_for``, docs/workloads.md).

Without ``wait_for`` a later turn is released when the previous turn of its session finishes,
plus its delay, and a first turn arrives at its session's timestamp (the driver does both).
A turn with ``wait_for`` waits for every request it names *and* its session's previous turn;
it is released ``delay_ms / arrival_speedup_ratio`` after the last of them finishes (or is
rejected), as the reference's agentic replay releases a row after its ``wait_for``
completions plus its delay and tool wait (Dynamo's ``loadgen`` ``AgenticMooncake`` format). A
session whose first turn has ``wait_for`` has no arrival of its own. The driver calls
:meth:`DependencyRelease.finished` for every finished request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.errors import ConfigError
from servesim.replay.driver import ARRIVAL

if TYPE_CHECKING:
    from servesim.replay.driver import Replayer
    from servesim.workload.model import Session, Workload


def has_dependencies(workload: Workload) -> bool:
    """Whether any turn of ``workload`` waits for another session's request."""
    return any(t.wait_for for s in workload.sessions for t in s.turns)


class DependencyRelease:
    """The dependency graph of one replay, as ``Replayer.release``."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer
        self.speedup = replayer.speedup
        self.remaining: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = {}
        roots: list[Session] = []
        for s in replayer.workload.sessions:
            if not s.turns[0].wait_for:
                roots.append(s)
            for prev, t in zip([None, *s.turns], s.turns, strict=False):
                if not t.wait_for:
                    continue
                deps = set(t.wait_for)
                if prev is not None:
                    deps.add(prev.request_id)
                    # the graph releases it, not the session chain
                    replayer.next_turn[prev.request_id] = -1
                self.remaining[t.request_id] = len(deps)
                for d in sorted(deps):
                    self.dependents.setdefault(d, []).append(t.request_id)
        self.roots: tuple[Session, ...] = tuple(roots)

    def finished(self, rid: int, now: float) -> None:
        """Request ``rid`` finished at ``now``: release the turns it was the last wait of."""
        for d in self.dependents.pop(rid, ()):
            left = self.remaining[d] - 1
            self.remaining[d] = left
            if not left:
                delay = self.replayer.turns[d].delay_ms / self.speedup
                self.replayer.push_event(now + delay, ARRIVAL, d)


def attach_release(replayer: Replayer, concurrency: int | None) -> None:
    """Give ``replayer`` its dependency graph (only for a workload that has one)."""
    if concurrency is not None:
        raise ConfigError("closed-loop concurrency is not supported with a trace whose requests "
                          "wait for other sessions' requests ('wait_for')",
                          path="workload.concurrency")
    replayer.release = DependencyRelease(replayer)


__all__ = ["DependencyRelease", "attach_release", "has_dependencies"]
