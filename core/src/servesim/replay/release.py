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
play's earliest root (divided by ``arrival_speedup_ratio``; a snapshot's roots are timed from
their play's cut, servesim.workload.snapshot), and a lane is free again when every request of
its play has finished. Lanes cap whole plays, not the requests inside one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError
from servesim.replay.driver import ARRIVAL
from servesim.workload.plays import ordered_plays, play_of

if TYPE_CHECKING:
    from servesim.replay.driver import Replayer
    from servesim.workload.model import Session, Workload


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

    def start_lanes(self, lanes: int, from_cut: bool = False) -> None:
        """Replace timestamp arrivals by ``lanes`` lanes of plays (see the module docstring)."""
        self.lanes = _Lanes(self.replayer, lanes, from_cut)
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
    """The plays of a dependency graph (servesim.workload.plays) and the lanes that run them."""

    def __init__(self, replayer: Replayer, lanes: int, from_cut: bool) -> None:
        self.replayer = replayer
        self.from_cut = from_cut
        self.play_of = play_of(replayer.workload)
        self.left: dict[int, int] = {}
        for play in self.play_of:
            self.left[play] = self.left.get(play, 0) + 1
        self.queue = ordered_plays(replayer.workload)
        self.next = 0
        # A snapshot kept the first plays, each timed from its cut: all start at once, also
        # those the cut split into several trees.
        for _ in range(len(self.queue) if from_cut else min(lanes, len(self.queue))):
            self._start(0.0)

    def _start(self, now: float) -> None:
        roots = self.queue[self.next]
        self.next += 1
        first = 0.0 if self.from_cut else roots[0][0]
        for t, _, rid in roots:
            self.replayer.push_event(now + (t - first) / self.replayer.speedup, ARRIVAL, rid)

    def finished(self, rid: int, now: float) -> None:
        play = self.play_of[rid]
        self.left[play] -= 1
        if not self.left[play] and self.next < len(self.queue):
            self._start(now)


def snapshot_workload(workload: Workload, cfg: Any) -> tuple[Workload, dict[str, Any] | None]:
    """``workload`` cut by ``cfg.snapshot`` (servesim.workload.snapshot) and the report's
    ``snapshot`` entry, or ``workload`` unchanged and None."""
    if cfg.snapshot is None:
        return workload, None
    if not workload.has_dependencies():
        refuse_lanes_without_graph(cfg.lanes)
    from servesim.workload.snapshot import take_snapshot

    cut, plays = take_snapshot(workload, cfg.lanes, cfg.snapshot.seed)
    return cut, {"seed": cfg.snapshot.seed, "plays": plays}


def attach_release(replayer: Replayer, concurrency: int | None, lanes: int | None = None,
                   from_cut: bool = False, max_concurrency: int | None = None,
                   warmup_wait: bool = False) -> None:
    """Give ``replayer`` its dependency graph (only for a workload that has one), run by
    ``lanes`` lanes when set (``from_cut``: a snapshot's roots are already timed from their
    play's cut, not from its earliest root)."""
    for key, value in (("concurrency", concurrency), ("max_concurrency", max_concurrency),
                       ("warmup.wait", True if warmup_wait else None)):
        if value is not None:
            raise ConfigError(f"workload.{key} is not supported with a trace whose requests wait for "
                              "other sessions' requests ('wait_for'); use workload.lanes",
                              path=f"workload.{key}")
    from servesim.replay.edge_release import EdgeRelease, has_edges

    if has_edges(replayer.workload):
        edges = EdgeRelease(replayer)
        # A snapshot kept the first plays, each timed from its cut: all start at once.
        edges.start(None if from_cut else lanes)
        replayer.release = edges
        return
    release = DependencyRelease(replayer)
    if lanes is not None:
        release.start_lanes(lanes, from_cut)
    replayer.release = release


def refuse_lanes_without_graph(lanes: int | None) -> None:
    """``workload.lanes`` needs a dependency graph: plays are its trees."""
    if lanes is not None:
        raise ConfigError("lanes run the plays of a trace whose requests wait for other requests "
                          "(agentic formats); for sessions use workload.concurrency",
                          path="workload.lanes")


__all__ = ["DependencyRelease", "attach_release", "refuse_lanes_without_graph",
           "snapshot_workload"]
