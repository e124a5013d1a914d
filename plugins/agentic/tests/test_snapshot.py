"""workload.snapshot (servesim.workload.snapshot, servesim.workload.edge_snapshot): the first
`lanes` plays start part-way, at a seeded cut between 25% and 75% of their span of start
times, for session chains with ``wait_for`` and for the reference's typed edges."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines


def chain(prefix, times, hashes):
    rows = []
    for i, t in enumerate(times):
        row = {"request_id": f"{prefix}{i}", "session_id": prefix, "timestamp": t, "input_length": 32,
               "output_length": 4, "hash_ids": [hashes + i]}
        if i:
            row["wait_for"] = [f"{prefix}{i - 1}"]
            row["delay"] = 20
        rows.append(row)
    return rows


ROWS = chain("a", [0, 200, 400, 600, 1000], 10) + chain("b", [50, 150, 250, 450, 850], 20) \
    + chain("c", [70, 90], 30)


def run(tmp_path, sets):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload:\n  trace: {{path: {trace}, format: agentic_mooncake, trace_block_size: 32}}\n")
    res = simulate(load_config(str(cfg), list(sets), Plugins()))
    lines = [json.loads(x) for x in per_request_lines(res.log, res.session_ids)]
    return res.report, lines


def test_the_first_plays_start_at_their_cuts(tmp_path):
    rep, lines = run(tmp_path, ["workload.lanes=2", "workload.snapshot.seed=7"])
    snap = rep["snapshot"]
    assert snap["seed"] == 7 and [p["play"] for p in snap["plays"]] == ["a", "b"]  # c is never started
    times = {"a": [0, 200, 400, 600, 1000], "b": [50, 150, 250, 450, 850]}
    for p in snap["plays"]:
        t = times[p["play"]]
        lo, hi = t[0], t[-1]
        assert lo + 0.25 * (hi - lo) <= p["cut_ms"] <= lo + 0.75 * (hi - lo)
        history = sum(1 for x in t if x < p["cut_ms"])
        assert (p["history"], p["remaining"]) == (history, len(t) - history)
        mine = sorted((r for r in lines if r["session_id"] == p["play"]), key=lambda r: r["arrival_ms"])
        assert len(mine) == len(t) - history
        # the first replayed request waits for nothing left: released at its start less the cut
        assert mine[0]["arrival_ms"] == pytest.approx(t[history] - p["cut_ms"], abs=1e-6)
        for prev, nxt in zip(mine, mine[1:], strict=False):  # the rest keep their dependency timers
            assert nxt["arrival_ms"] == pytest.approx(prev["completion_ms"] + 20.0, abs=1e-6)
    assert rep["num_requests"] == sum(p["remaining"] for p in snap["plays"]) == len(lines)
    again, _ = run(tmp_path, ["workload.lanes=2", "workload.snapshot.seed=7"])
    other, _ = run(tmp_path, ["workload.lanes=2", "workload.snapshot.seed=8"])
    assert again["snapshot"] == snap and other["snapshot"] != snap


def test_a_snapshot_needs_lanes(tmp_path):
    with pytest.raises(ConfigError) as info:
        run(tmp_path, ["workload.snapshot.seed=7"])
    assert info.value.path == "workload.snapshot"


# Typed edges (servesim.workload.edge_snapshot): agentic_mooncake v2 rows and a dynamo
# request trace, whose requests the reference's graph releases (servesim.replay.edge_release).
HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 16,
          "hash_id_scope": "local", "source": {"format": "test", "digest": "d"}}


def row(rid, nb=0.0, deps=(), session="s", play="p"):
    return {"request_id": rid, "play_id": play, "session_id": session, "model": "m",
            "input_length": 48, "output_length": 10, "hash_ids": [1, 2, 3],
            "not_before_ms": nb, "dependencies": list(deps)}


def dep(rid, trigger="completion", delay=0.0, relation="sequence"):
    return {"request_id": rid, "trigger": trigger, "delay_ms": delay, "relation": relation}


def write_lines(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def request(rid, start, session, parent=None):
    """A dynamo.request.trace.v1 request_end record of 10 ms."""
    ctx = {"session_id": session} | ({"parent_session_id": parent} if parent else {})
    return {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "event_time_unix_ms": start + 10, "agent_context": ctx,
            "request": {"request_id": rid, "output_tokens": 2, "request_received_ms": start,
                        "total_time_ms": 10, "replay": {"trace_block_size": 4, "input_length": 4,
                                                        "input_sequence_hashes": [11]}}}


def run_v2(tmp_path, rows, sets, fmt="agentic_mooncake"):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"engine: {{block_size: 16, num_gpu_blocks: 1000}}\n"
                   f"workload:\n  trace: {{path: {rows}, format: {fmt}}}\n")
    res = simulate(load_config(str(cfg), list(sets), Plugins()))
    return res.report, [json.loads(x) for x in per_request_lines(res.log, res.session_ids)]


# Play p: a; b after a's completion (+10); c spawned at a's dispatch (+45); d after b's
# completion (+50) and c's dispatch (+20); e after d's completion (+100). Start times (every
# request finishing at its dispatch): a 0, b 10, c 45, d 65, e 165. Play q: f at 100, g after
# f's completion (+400): start 500. Play r: h at 20, third in queue order.
V2_ROWS = [row("a"), row("b", deps=[dep("a", delay=10.0)]),
           row("c", deps=[dep("a", "dispatch", 45.0, "spawn")], session="s2"),
           row("d", deps=[dep("b", delay=50.0), dep("c", "dispatch", 20.0, "spawn")]),
           row("e", deps=[dep("d", delay=100.0)]),
           row("f", 100.0, session="t", play="q"),
           row("g", deps=[dep("f", delay=400.0)], session="t", play="q"),
           row("h", 20.0, session="u", play="r")]


def test_a_v2_graph_is_cut_and_released_from_its_cuts(tmp_path):
    rep, lines = run_v2(tmp_path, write_lines(tmp_path / "t.jsonl", [HEADER, *V2_ROWS]),
                        ["workload.lanes=2", "workload.snapshot.seed=3"])
    assert rep["snapshot"] == {"seed": 3, "plays": [
        {"play": "s", "cut_ms": 42.265623, "history": 2, "remaining": 3},
        {"play": "t", "cut_ms": 371.950179, "history": 1, "remaining": 1}]}
    # Kept in request order: c, d, e, g (0..3). c's spawn edge fired in the history: released
    # at its start less the cut, 45 - 42.265623. d's edge from b fired too (floor 60 - cut =
    # 17.734377), its spawn from c did not: c's dispatch + 20 = 22.734377. e keeps its
    # completion edge: d's completion + 100. g: 500 - 371.950179. h's play never starts.
    got = {r["request_id"]: (r["session_id"], r["arrival_ms"], r["completion_ms"]) for r in lines}
    assert got == {0: ("s2", 2.734377, 91.200524), 1: ("s", 22.734377, 103.061328),
                   2: ("s", 203.061328, 273.073417), 3: ("t", 128.049821, 198.06191)}
    assert rep["num_requests"] == 4


def test_a_dynamo_request_trace_is_cut_at_its_reconstructed_start_times(tmp_path):
    # Start times from the edges: source 0, child-first 20 (spawned at the source's dispatch
    # + 20), child-last 40 (child-first's completion + 20; recorded 50: child-first's 10 ms of
    # service are not in the graph), consumer 90 (the source's completion + 90).
    path = write_lines(tmp_path / "d.jsonl", [
        request("parent-source", 100, "parent"), request("child-first", 120, "child", "parent"),
        request("child-last", 150, "child", "parent"), request("parent-consumer", 200, "parent")])
    rep, lines = run_v2(tmp_path, path, ["workload.lanes=1", "workload.snapshot.seed=1"],
                        "dynamo_request_trace")
    # The cut falls in the span [0, 90]: the source and child-first are history.
    assert rep["snapshot"] == {"seed": 1, "plays": [
        {"play": "parent", "cut_ms": 34.704455, "history": 2, "remaining": 2}]}
    got = {r["request_id"]: (r["session_id"], r["arrival_ms"]) for r in lines}
    # child-last (0) lost its only edge: released at 40 less the cut. The consumer (1) keeps
    # its join on child-last's completion (+40), later than its floor, 90 less the cut.
    done = lines[0]["completion_ms"] if lines[0]["request_id"] == 0 else lines[1]["completion_ms"]
    assert done + 40.0 > 90 - 34.704455
    assert got == {0: ("child", 5.295545), 1: ("parent", pytest.approx(done + 40.0, abs=1e-6))}


def test_a_cut_that_leaves_no_dependency_releases_the_rest_from_the_cut(tmp_path):
    rep, lines = run_v2(tmp_path, write_lines(tmp_path / "t.jsonl", [HEADER, *V2_ROWS]),
                        ["workload.lanes=1", "workload.snapshot.seed=2"])
    assert rep["snapshot"]["plays"] == [{"play": "s", "cut_ms": 97.093231, "history": 4, "remaining": 1}]
    # e alone: its edge from d fired in the history, at d's start + 100 = 165
    assert [(r["request_id"], r["session_id"], r["arrival_ms"]) for r in lines] == [(0, "s", 67.906769)]


def test_a_play_the_cut_splits_starts_all_its_trees_at_once(tmp_path):
    # One play: a0 starts chain a and, with wait_for, chain x. Cutting after a0 leaves two
    # trees (a1-a2 and x0-x1); both start from the cut, though one lane ran the play.
    rows = [{"request_id": "a0", "session_id": "a", "timestamp": 0},
            {"request_id": "a1", "session_id": "a", "timestamp": 500, "wait_for": ["a0"], "delay": 20},
            {"request_id": "a2", "session_id": "a", "timestamp": 1000, "wait_for": ["a1"], "delay": 2000},
            {"request_id": "x0", "session_id": "x", "timestamp": 600, "wait_for": ["a0"], "delay": 20},
            {"request_id": "x1", "session_id": "x", "timestamp": 700, "wait_for": ["x0"], "delay": 20}]
    trace = write_lines(tmp_path / "split.jsonl", [
        dict(r, input_length=32, output_length=4, hash_ids=[i]) for i, r in enumerate(rows)])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload:\n  trace: {{path: {trace}, format: agentic_mooncake, trace_block_size: 32}}\n")
    res = simulate(load_config(str(cfg), ["workload.lanes=1", "workload.snapshot.seed=1"], Plugins()))
    assert res.report["snapshot"]["plays"] == [
        {"play": "a", "cut_ms": 385.60505, "history": 1, "remaining": 4}]
    lines = [json.loads(x) for x in per_request_lines(res.log, res.session_ids)]
    got = {r["request_id"]: r for r in lines}
    # a1 and x0 wait for nothing left: released at their start times less the cut
    assert [(got[i]["session_id"], got[i]["arrival_ms"]) for i in (0, 2)] == [
        ("a", pytest.approx(500 - 385.60505, abs=1e-6)), ("x", pytest.approx(600 - 385.60505, abs=1e-6))]
    assert got[1]["arrival_ms"] == pytest.approx(got[0]["completion_ms"] + 2000.0, abs=1e-6)
    assert got[3]["arrival_ms"] == pytest.approx(got[2]["completion_ms"] + 20.0, abs=1e-6)
