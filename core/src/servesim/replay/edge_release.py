"""Releasing a workload whose turns carry typed dependency edges (``Turn.edges``), as Dynamo
1.6.1's agentic replay releases the rows of an ``agentic_mooncake`` v2 or ``weka`` trace.

Each edge is ``(source, on_dispatch, delay_ms)``. A turn becomes ready once every edge has
fired: a dispatch edge when its source is dispatched (released to the engines), a completion
edge when its source finishes (or is rejected). It is released at the latest of its
``not_before_ms`` and, over its edges, the source event's time plus the edge's delay; delays
and ``not_before_ms`` are divided by ``arrival_speedup_ratio``. A turn without edges (a root)
is released at ``not_before_ms / arrival_speedup_ratio``, *not* rebased to the earliest root:
the reference measures arrivals from the trace's zero (both checked against the reference's
report, tests/golden/agentic). Observed in the reference (``aisimulate`` ``WorkloadDriver``
``new_agentic_trace``): ``ready_after_ms`` starts at ``not_before_ms``, dispatch and completion
dependents are kept apart and each edge adds its own delay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.replay.driver import ARRIVAL

if TYPE_CHECKING:
    from servesim.replay.driver import Replayer
    from servesim.workload.model import Workload


def has_edges(workload: Workload) -> bool:
    """Whether any turn of ``workload`` carries typed dependency edges."""
    return any(t.edges for s in workload.sessions for t in s.turns)


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
                floor = (t.not_before_ms or 0.0) / speed
                if not t.edges:
                    roots.append((floor, t.request_id))
                    continue
                self.remaining[t.request_id] = len(t.edges)
                self.due[t.request_id] = floor
                for src, on_dispatch, delay in t.edges:
                    table = self.on_dispatch if on_dispatch else self.on_finish
                    table.setdefault(src, []).append((t.request_id, delay / speed))
        for at, rid in sorted(roots):
            self._dispatch(rid, at)

    def _dispatch(self, rid: int, at: float) -> None:
        """Release ``rid`` at ``at`` and fire the edges that wait for its dispatch."""
        self.replayer.push_event(at, ARRIVAL, rid)
        for target, delay in self.on_dispatch.pop(rid, ()):
            self._fire(target, at + delay)

    def _fire(self, target: int, due: float) -> None:
        self.due[target] = max(self.due[target], due)
        left = self.remaining[target] - 1
        self.remaining[target] = left
        if not left:
            self._dispatch(target, self.due.pop(target))

    def finished(self, rid: int, now: float) -> None:
        """Request ``rid`` finished at ``now``: fire the completion edges that wait for it."""
        for target, delay in self.on_finish.pop(rid, ()):
            self._fire(target, now + delay)


__all__ = ["EdgeRelease", "has_edges"]
