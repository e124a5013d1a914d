"""Releasing a workload whose turns carry typed dependency edges (``EdgeTurn.edges``), as Dynamo
1.6.1's agentic replay releases the rows of an ``agentic_mooncake`` v2 or ``weka`` trace.

Each edge is ``(source, on_dispatch, delay_ms)``. A turn becomes ready once every edge has
fired: a dispatch edge when its source is dispatched (released to the engines), a completion
edge when its source finishes (or is rejected). It is released at the latest of its
``not_before_ms`` and, over its edges, the source event's time plus the edge's delay; delays
and ``not_before_ms`` are divided by ``arrival_speedup_ratio``. A turn without edges (a root)
is released at ``not_before_ms / arrival_speedup_ratio``, *not* rebased to the earliest root:
the reference measures arrivals from the trace's zero (both checked against the reference's
report, tests/golden/agentic). ``workload.lanes`` runs at most N plays at once
(:class:`_EdgeLanes`). Observed in the reference (``aisimulate`` ``WorkloadDriver``
``new_agentic_trace``): ``ready_after_ms`` starts at ``not_before_ms``, dispatch and completion
dependents are kept apart and each edge adds its own delay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.replay.driver import ARRIVAL
from servesim.workload.model import EdgeTurn

if TYPE_CHECKING:
    from servesim.replay.driver import Replayer
    from servesim.workload.model import Workload


def has_edges(workload: Workload) -> bool:
    """Whether any turn of ``workload`` carries typed dependency edges (an :class:`EdgeTurn`)."""
    return any(type(t) is EdgeTurn for s in workload.sessions for t in s.turns)


def _edges(t: object) -> tuple[tuple[int, bool, float], ...]:
    return t.edges if isinstance(t, EdgeTurn) else ()


def _floor(t: object) -> float:
    return (t.not_before_ms or 0.0) if isinstance(t, EdgeTurn) else 0.0


class EdgeRelease:
    """The typed dependency graph of one replay, as ``Replayer.release``."""

    def __init__(self, replayer: Replayer) -> None:
        self.replayer = replayer
        speed = replayer.speedup
        self.roots = ()  # this class releases the roots itself
        self.remaining: dict[int, int] = {}
        self.due: dict[int, float] = {}
        self.on_dispatch: dict[int, list[tuple[int, float]]] = {}
        self.on_finish: dict[int, list[tuple[int, float]]] = {}
        roots: list[tuple[float, int]] = []
        for s in replayer.workload.sessions:
            for t in s.turns:
                floor = _floor(t) / speed
                edges = _edges(t)
                if not edges:
                    roots.append((floor, t.request_id))
                    continue
                self.remaining[t.request_id] = len(edges)
                self.due[t.request_id] = floor
                for src, on_dispatch, delay in edges:
                    table = self.on_dispatch if on_dispatch else self.on_finish
                    table.setdefault(src, []).append((t.request_id, delay / speed))
        self.lanes: _EdgeLanes | None = None
        self.root_times = sorted(roots)

    def start(self, lanes: int | None) -> None:
        """Release the roots: at their ``not_before_ms``, or by ``lanes`` lanes of plays."""
        if lanes is None:
            for at, rid in self.root_times:
                self.dispatch(rid, at)
        else:
            self.lanes = _EdgeLanes(self, lanes)

    def dispatch(self, rid: int, at: float) -> None:
        """Release ``rid`` at ``at`` and fire the edges that wait for its dispatch."""
        self.replayer.push_event(at, ARRIVAL, rid)
        for target, delay in self.on_dispatch.pop(rid, ()):
            self._fire(target, at + delay)

    def _fire(self, target: int, due: float) -> None:
        self.due[target] = max(self.due[target], due)
        left = self.remaining[target] - 1
        self.remaining[target] = left
        if not left:
            self.dispatch(target, self.due.pop(target))

    def finished(self, rid: int, now: float) -> None:
        """Request ``rid`` finished at ``now``: fire the completion edges that wait for it."""
        for target, delay in self.on_finish.pop(rid, ()):
            self._fire(target, now + delay)
        if self.lanes is not None:
            self.lanes.finished(rid, now)


class _EdgeLanes:
    """``workload.lanes`` over typed edges: at most N plays at once (the reference's
    ``agentic_lanes``). Plays (servesim.workload.plays: requests joined by dependencies) queue
    in session order (the reader puts sessions in play order); a free lane takes the next play
    at once, shifting the play's ``not_before_ms`` floors so its earliest root starts then; a
    lane is free again when every request of its play has finished."""

    def __init__(self, release: EdgeRelease, lanes: int) -> None:
        from servesim.workload.plays import play_of

        self.release = release
        workload = release.replayer.workload
        self.play_of = play_of(workload)
        self.left: dict[int, int] = {}
        members: dict[int, list[int]] = {}
        order: list[int] = []
        for s in workload.sessions:
            for t in s.turns:
                play = self.play_of[t.request_id]
                if play not in members:
                    members[play] = []
                    order.append(play)
                members[play].append(t.request_id)
                self.left[play] = self.left.get(play, 0) + 1
        self.members = members
        self.queue = order
        self.next = 0
        for _ in range(min(lanes, len(order))):
            self._start(0.0)

    def _start(self, now: float) -> None:
        rel = self.release
        play = self.queue[self.next]
        self.next += 1
        turns = rel.replayer.turns
        speed = rel.replayer.speedup
        rids = self.members[play]
        base = min(_floor(turns[r]) for r in rids if not _edges(turns[r])) / speed
        for r in rids:
            if r in rel.due:  # a dependent: its floor moves with the play
                rel.due[r] += now - base
        for at, rid in [(at, rid) for at, rid in rel.root_times if self.play_of[rid] == play]:
            rel.dispatch(rid, now + at - base)

    def finished(self, rid: int, now: float) -> None:
        play = self.play_of[rid]
        self.left[play] -= 1
        if not self.left[play] and self.next < len(self.queue):
            self._start(now)


__all__ = ["EdgeRelease", "has_edges"]
