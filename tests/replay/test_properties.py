"""Driver invariants over random small workloads (toy rank, hypothesis, derandomized)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from replay_toy import make_factory
from servesim.config.sections import ReportConfig
from servesim.fast.engine_runs import RunEngine
from servesim.fast.overlay import FastOverlay
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter
from servesim.report.summary import build_report, dumps
from servesim.workload.mooncake import MooncakeTrace

turn = st.tuples(
    st.lists(st.integers(0, 6), min_size=1, max_size=4),  # hash ids (small alphabet: sharing)
    st.integers(0, 5),  # output length
    st.one_of(st.none(), st.floats(0, 30, allow_nan=False)),  # delay of a later turn
)
session = st.tuples(st.integers(0, 200), st.lists(turn, min_size=1, max_size=3))


def to_lines(sessions) -> list[str]:
    lines = []
    for s, (ts, turns) in enumerate(sessions):
        for k, (ids, out, delay) in enumerate(turns):
            rec = {"hash_ids": ids, "output_length": out, "session_id": s}
            if k == 0:
                rec["timestamp"] = ts
            elif delay is not None:
                rec["delay"] = delay
            lines.append(json.dumps(rec))
    return lines


def run(lines, workers, kv, concurrency, cap=None):
    wl = MooncakeTrace.parse_lines(lines, "p.jsonl", 4)
    f = make_factory(kv_events=kv)
    f.engine_class = RunEngine
    router = KvRouter(workers, 1, 4) if kv else None
    r = Replayer(build_engines(f.build, workers), wl, router=router, block_size=4,
                 concurrency=concurrency, max_concurrency=cap, speed=FastOverlay(runs=True))
    r.run()
    return wl, r


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    sessions=st.lists(session, min_size=1, max_size=8),
    workers=st.integers(1, 3),
    kv=st.booleans(),
    concurrency=st.one_of(st.none(), st.integers(1, 3)),
    cap=st.one_of(st.none(), st.integers(1, 3)),
)
def test_replay_invariants(sessions, workers, kv, concurrency, cap):
    lines = to_lines(sessions)
    cap = cap if concurrency is None else None
    wl, r = run(lines, workers, kv, concurrency, cap)
    log = r.log
    turns = wl.turns()
    for t in turns:
        rid = t.request_id
        assert log.done[rid] >= log.arrival[rid] >= 0.0
        assert log.ntok[rid] == t.output_length
        if t.output_length:
            assert log.arrival[rid] <= log.first[rid] <= log.last[rid] == log.done[rid]
    assert len(log.itl) == sum(max(t.output_length - 1, 0) for t in turns)
    assert all(g >= 0 for g in log.itl)
    for s in wl.sessions:
        for a, b in zip(s.turns, s.turns[1:], strict=False):
            assert log.arrival[b.request_id] == log.done[a.request_id] + b.delay_ms
    limit = concurrency if concurrency is not None else cap
    if limit is not None:
        # at most N sessions are active; a session holds its slot through its think times
        assert log.max_in_flight <= limit
        spans = sorted((log.arrival[s.turns[0].request_id], log.done[s.turns[-1].request_id])
                       for s in wl.sessions)
        for start, _ in spans:
            active = sum(1 for a, b in spans if a <= start < b)
            assert active <= limit
    if concurrency is None:
        # timestamp mode: no session starts before its (rebased) timestamp; uncapped, at it
        base = min(s.start_ms for s in wl.sessions)
        for s in wl.sessions:
            due = s.start_ms - base
            arrival = log.arrival[s.turns[0].request_id]
            assert arrival >= due if cap is not None else arrival == due
    rep = build_report(log, ReportConfig())
    assert rep["completed"] == len(turns)
    assert rep["total_output_tokens"] == sum(t.output_length for t in turns)
    assert dumps(rep) == dumps(build_report(run(lines, workers, kv, concurrency, cap)[1].log, ReportConfig()))
