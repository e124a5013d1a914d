"""A snapshot start (``workload.snapshot``, servesim.workload.snapshot) of a workload whose
turns carry typed dependency edges (:class:`~servesim.workload.model.EdgeTurn`: the
``agentic_mooncake`` v2, ``weka`` and agentic ``dynamo_request_trace`` formats), released by
servesim.replay.edge_release.

A request's *start time* is when it would be released were every request to finish the moment
it is dispatched, and never before a request it waits for starts: the latest of its
``not_before_ms`` and, over its edges, the source's start time plus the edge's delay, and the
source's start time. It is the release time for a root and through dispatch edges; through a
completion edge the source's service time, which the trace does not hold, is taken as zero
(a lower bound).

Plays (servesim.workload.plays) queue in session order, as ``workload.lanes`` starts them
over typed edges; the first ``lanes`` are cut. Per play, a cut is drawn uniformly between 25%
and 75% of the span of its requests' start times from the snapshot's generator, as for the
other formats. Requests that start before the cut are *history* and are not replayed. A request
starts no earlier than its sources, so history holds every source of a history request: a
replayed request may wait for history, never the reverse. A replayed request keeps its edges
from replayed requests (trigger and delay); an edge from history has fired, and its time stays
as a floor: the request's ``not_before_ms`` becomes the latest of its own and, over those
edges, the source's start time plus the delay, less the cut (at least 0). A request left with
no edge is therefore released at its start time less the cut.
"""

from __future__ import annotations

from typing import Any

import attrs

from servesim.workload.model import EdgeTurn, Session, Turn, Workload, make_workload
from servesim.workload.plays import cut_plays, play_of


def has_edge_turns(workload: Workload) -> bool:
    """Whether any turn of ``workload`` is an :class:`EdgeTurn`."""
    return any(type(t) is EdgeTurn for s in workload.sessions for t in s.turns)


def _edges(t: Turn) -> tuple[tuple[int, bool, float], ...]:
    return t.edges if isinstance(t, EdgeTurn) else ()


def _floor(t: Turn) -> float:
    return (t.not_before_ms or 0.0) if isinstance(t, EdgeTurn) else 0.0


def edge_start_times(workload: Workload) -> list[float]:
    """Per request id, its start time (see the module docstring)."""
    turns = workload.turns()
    out: dict[int, float] = {}
    for rid in range(len(turns)):
        stack = [rid]  # iterative depth-first: sources first (the graph is acyclic)
        while stack:
            r = stack[-1]
            if r in out:
                stack.pop()
                continue
            edges = _edges(turns[r])
            todo = [src for src, _, _ in edges if src not in out]
            if todo:
                stack.extend(todo)
                continue
            out[r] = max([_floor(turns[r])] + [max(out[src] + delay, out[src]) for src, _, delay in edges])
            stack.pop()
    return [out[r] for r in range(len(turns))]


def take_edge_snapshot(workload: Workload, lanes: int, cut_at: Any) -> tuple[Workload, list[dict[str, Any]]]:
    """The workload of the first ``lanes`` plays cut part-way, and per play its cut;
    ``cut_at(lo, hi)`` draws a play's cut from its span of start times."""
    plays = play_of(workload)
    starts = edge_start_times(workload)
    queue = list(dict.fromkeys(plays[t.request_id] for s in workload.sessions for t in s.turns))
    name: dict[int, str] = {}  # the session of the play's first root (every play has one)
    for s in workload.sessions:
        for t in s.turns:
            if not _edges(t):
                name.setdefault(plays[t.request_id], s.session_id)
    cut_of, info, new_id = cut_plays(plays, starts, [(p, name[p]) for p in queue[:lanes]], cut_at)
    sessions = []
    for s in workload.sessions:
        turns: list[Turn] = []
        for t in s.turns:
            if t.request_id not in new_id:
                continue
            cut = cut_of[plays[t.request_id]]
            floor = _floor(t)
            edges = []
            for src, on_dispatch, delay in _edges(t):
                if src in new_id:
                    edges.append((new_id[src], on_dispatch, delay))
                else:  # fired in the history
                    floor = max(floor, starts[src] + delay)
            turn = attrs.evolve(t, request_id=new_id[t.request_id],
                                wait_for=tuple(dict.fromkeys(e[0] for e in edges)))
            if isinstance(turn, EdgeTurn):
                turn.edges = tuple(edges)
                turn.not_before_ms = max(floor - cut, 0.0)
            turns.append(turn)
        if turns:
            first = turns[0]
            sessions.append(Session(s.session_id, first.not_before_ms if isinstance(first, EdgeTurn)
                                    else s.start_ms, turns))
    return make_workload(sessions, workload.source), info


__all__ = ["edge_start_times", "has_edge_turns", "take_edge_snapshot"]
