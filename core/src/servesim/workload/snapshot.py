"""A snapshot start (``workload.snapshot``, docs/workloads.md): each of the first ``lanes``
plays (servesim.workload.plays) starts part-way, as AISimulate's ``agentic_snapshot`` (its
docs/replay/workloads.md, "Snapshot").

Per play, in queue order, a cut is drawn uniformly between 25% and 75% of the span of its
requests' start times, from a ``numpy`` generator seeded by ``seed``. A request's start time is
its session's timestamp when it is the first turn of a session that has one, else the latest
start of the requests it waits for (a root without a timestamp starts at 0). Requests that
started before the cut are *history*: they are not replayed. The rest are, with their own
timers: a request left waiting for nothing is released at its start time less the cut; one
still waiting for replayed requests keeps its dependencies and delay. Only those plays run;
the caches start empty (a snapshot is cut at request boundaries and restores no engine state).
A workload whose turns carry typed edges (``EdgeTurn``) is cut by
servesim.workload.edge_snapshot, with the same draws.
"""

from __future__ import annotations

from typing import Any

import attrs

from servesim.workload.edge_snapshot import has_edge_turns, take_edge_snapshot
from servesim.workload.model import Session, Turn, Workload, make_workload
from servesim.workload.plays import cut_plays, ordered_plays, play_of

_SNAPSHOT_STREAM = 0x534E4150  # "SNAP": a stream of its own


def start_times(workload: Workload) -> list[float]:
    """Per request id, its start time (see the module docstring)."""
    turns = workload.turns()
    first_start: dict[int, float | None] = {s.turns[0].request_id: s.start_ms for s in workload.sessions}
    prev: dict[int, int] = {}
    for s in workload.sessions:
        for t, nxt in zip(s.turns, s.turns[1:], strict=False):
            prev[nxt.request_id] = t.request_id
    out: dict[int, float] = {}

    def time(rid: int) -> float:
        # iterative depth-first: dependencies first (the graph is acyclic)
        stack = [rid]
        while stack:
            r = stack[-1]
            if r in out:
                stack.pop()
                continue
            start = first_start.get(r)
            deps = list(turns[r].wait_for) + ([prev[r]] if r in prev else [])
            if start is not None or not deps:
                out[r] = float(start or 0.0)
                stack.pop()
                continue
            todo = [d for d in deps if d not in out]
            if todo:
                stack.extend(todo)
                continue
            out[r] = max(out[d] for d in deps)
            stack.pop()
        return out[rid]

    return [time(r) for r in range(len(turns))]


def take_snapshot(workload: Workload, lanes: int, seed: int) -> tuple[Workload, list[dict[str, Any]]]:
    """The workload of the first ``lanes`` plays cut part-way, and per play its cut."""
    import numpy as np

    rng = np.random.default_rng([seed, _SNAPSHOT_STREAM])

    def cut_at(lo: float, hi: float) -> float:  # uniform over the middle half of the span
        return lo + float(rng.uniform(0.25, 0.75)) * (hi - lo)

    if has_edge_turns(workload):
        return take_edge_snapshot(workload, lanes, cut_at)
    plays = play_of(workload)
    queue = ordered_plays(workload)[:lanes]
    starts = start_times(workload)
    session_of = {t.request_id: s.session_id for s in workload.sessions for t in s.turns}
    chosen = [(plays[roots[0][2]], session_of[roots[0][2]]) for roots in queue]
    cut_of, info, new_id = cut_plays(plays, starts, chosen, cut_at)
    sessions = []
    for s in workload.sessions:
        turns: list[Turn] = []
        start = None
        for t in s.turns:
            if t.request_id not in new_id:
                continue
            deps = tuple(new_id[d] for d in t.wait_for if d in new_id)
            if not turns:  # the session's first replayed turn
                if not deps:
                    start = max(starts[t.request_id] - cut_of[plays[t.request_id]], 0.0)
                turns.append(attrs.evolve(t, request_id=new_id[t.request_id], wait_for=deps,
                                          delay_ms=t.delay_ms if deps else 0.0))
            else:
                turns.append(attrs.evolve(t, request_id=new_id[t.request_id], wait_for=deps))
        if turns:
            sessions.append(Session(s.session_id, start, turns))
    return make_workload(sessions, workload.source), info


__all__ = ["start_times", "take_snapshot"]
