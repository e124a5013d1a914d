"""Plays: the dependency trees of a workload whose requests wait for other requests
(``Turn.wait_for``), as AISimulate's agentic load controls group them (its
docs/replay/workloads.md, "Agentic Load Controls": "plays: dependency trees of requests from
one agent session").

A play is a connected set of requests joined by ``wait_for`` and by session chains. Plays are
ordered by their earliest root timestamp (a root: a session whose first turn waits for
nothing), then by file order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from servesim.workload.model import Workload


def play_of(workload: Workload) -> list[int]:
    """Per request id, the smallest request id of its play (the play's name)."""
    n = workload.num_requests
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for s in workload.sessions:
        for t, nxt in zip(s.turns, s.turns[1:], strict=False):
            join(t.request_id, nxt.request_id)
        for t in s.turns:
            for dep in t.wait_for:
                join(dep, t.request_id)
    return [find(r) for r in range(n)]


def ordered_plays(workload: Workload) -> list[list[tuple[float, int, int]]]:
    """The plays in queue order, each as its roots ``(timestamp, session index, request id)``
    in that order (a root without a timestamp counts as 0)."""
    plays = play_of(workload)
    by_play: dict[int, list[tuple[float, int, int]]] = {}
    for i, s in enumerate(workload.sessions):
        first = s.turns[0]
        if not first.wait_for:
            by_play.setdefault(plays[first.request_id], []).append(
                (float(s.start_ms or 0.0), i, first.request_id))
    return sorted((sorted(roots) for roots in by_play.values()), key=lambda roots: roots[0])


def cut_plays(plays: Sequence[int], starts: Sequence[float], chosen: Sequence[tuple[int, str]],
              cut_at: Callable[[float, float], float]
              ) -> tuple[dict[int, float], list[dict[str, Any]], dict[int, int]]:
    """A snapshot's cuts (servesim.workload.snapshot): each ``(play, name)`` of ``chosen``, in
    order, is cut at ``cut_at(lo, hi)`` of the span of its requests' start times ``starts``.
    Returns per play its cut, per play the report's ``{play, cut_ms, history, remaining}``, and
    the new ids of the replayed requests: those of a cut play starting at or after its cut, in
    request order."""
    cut_of: dict[int, float] = {}
    info = []
    for play, name in chosen:
        members = [r for r in range(len(plays)) if plays[r] == play]
        cut = cut_at(min(starts[r] for r in members), max(starts[r] for r in members))
        cut_of[play] = cut
        history = sum(1 for r in members if starts[r] < cut)
        info.append({"play": name, "cut_ms": cut, "history": history,
                     "remaining": len(members) - history})
    kept = [r for r in range(len(plays)) if plays[r] in cut_of and starts[r] >= cut_of[plays[r]]]
    return cut_of, info, {r: i for i, r in enumerate(kept)}


__all__ = ["cut_plays", "ordered_plays", "play_of"]
