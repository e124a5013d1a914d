"""workload.snapshot (servesim.workload.snapshot): the first `lanes` plays start part-way, at
a seeded cut between 25% and 75% of their span of start times."""

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
