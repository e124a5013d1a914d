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

``workload.lanes: N`` runs at most N *plays* at once, as AISimulate's ``agentic_lanes``
(docs/replay/workloads.md, "Lanes"): a play is a dependency tree (the requests joined by
``wait_for`` and session chains); plays are queued by their earliest root timestamp, then
file order; a free lane takes the next play at once, its roots keeping their offsets from the
play's earliest root (divided by ``arrival_speedup_ratio``), and a lane is free again when
every request of its play has finished. Lanes cap whole plays, not the requests inside one.
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
        self.lanes: _Lanes | None = None

    def start_lanes(self, lanes: int) -> None:
        """Replace timestamp arrivals by ``lanes`` lanes of plays (see the module docstring)."""
        self.lanes = _Lanes(self.replayer, self.roots, self.dependents, lanes)
        self.roots = ()

    def finished(self, rid: int, now: float) -> None:
        """Request ``rid`` finished at ``now``: release the turns it was the last wait of."""
        if self.lanes is not None:
            self.lanes.finished(rid, now)
        for d in self.dependents.pop(rid, ()):
            left = self.remaining[d] - 1
            self.remaining[d] = left
            if not left:
                delay = self.replayer.turns[d].delay_ms / self.speedup
                self.replayer.push_event(now + delay, ARRIVAL, d)


class _Lanes:
    """The plays of a dependency graph and the lanes that run them."""

    def __init__(self, replayer: Replayer, roots: tuple[Session, ...],
                 dependents: dict[int, list[int]], lanes: int) -> None:
        self.replayer = replayer
        n = len(replayer.turns)
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for dep, later in dependents.items():
            for rid in later:
                parent[find(dep)] = find(rid)
        for s in replayer.workload.sessions:
            for t, nxt in zip(s.turns, s.turns[1:], strict=False):
                parent[find(t.request_id)] = find(nxt.request_id)
        self.play_of = [find(r) for r in range(n)]
        self.left: dict[int, int] = {}
        for r in range(n):
            self.left[self.play_of[r]] = self.left.get(self.play_of[r], 0) + 1
        by_play: dict[int, list[tuple[float, int, int]]] = {}
        for order, s in enumerate(roots):
            rid = s.turns[0].request_id
            by_play.setdefault(self.play_of[rid], []).append((float(s.start_ms or 0.0), order, rid))
        self.queue = sorted(by_play.values(), key=lambda play: min(play))
        self.next = 0
        for _ in range(min(lanes, len(self.queue))):
            self._start(0.0)

    def _start(self, now: float) -> None:
        play = self.queue[self.next]
        self.next += 1
        first = min(t for t, _, _ in play)
        for t, _, rid in sorted(play):
            self.replayer.push_event(now + (t - first) / self.replayer.speedup, ARRIVAL, rid)

    def finished(self, rid: int, now: float) -> None:
        play = self.play_of[rid]
        self.left[play] -= 1
        if not self.left[play] and self.next < len(self.queue):
            self._start(now)


def attach_release(replayer: Replayer, concurrency: int | None, lanes: int | None = None) -> None:
    """Give ``replayer`` its dependency graph (only for a workload that has one), run by
    ``lanes`` lanes when set."""
    if concurrency is not None:
        raise ConfigError("closed-loop concurrency is not supported with a trace whose requests "
                          "wait for other sessions' requests ('wait_for'); use workload.lanes",
                          path="workload.concurrency")
    release = DependencyRelease(replayer)
    if lanes is not None:
        release.start_lanes(lanes)
    replayer.release = release


def refuse_lanes_without_graph(lanes: int | None) -> None:
    """``workload.lanes`` needs a dependency graph: plays are its trees."""
    if lanes is not None:
        raise ConfigError("lanes run the plays of a trace whose requests wait for other requests "
                          "(agentic formats); for sessions use workload.concurrency",
                          path="workload.lanes")


__all__ = ["DependencyRelease", "attach_release", "has_dependencies", "refuse_lanes_without_graph"]
