"""The ``weka`` reader: the lowering pinned on the reference's own examples (aisimulate
``replay/loadgen/weka.rs`` tests), the timestamp bases, sources, and errors naming the file,
line and field."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError, TraceError
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines
from servesim_agentic.weka import WekaTrace, lower_play, parse_play


def req(t, inp, out, hashes, api=None, kind="s"):
    r = {"t": t, "type": kind, "model": "model", "in": inp, "out": out, "hash_ids": hashes}
    if api is not None:
        r["api_time"] = api
    return r


def play(requests, pid="play", block=4):
    return {"id": pid, "models": ["model"], "block_size": block, "hash_id_scope": "local",
            "requests": requests}


# The reference's ``explicit_overlap_join_and_background_lower_to_typed_edges``.
OVERLAP = play([
    req(0.0, 8, 1, [1, 2], 1.0),
    {"t": 0.3, "type": "subagent", "agent_id": "a", "subagent_type": "Explore", "duration_ms": 400,
     "status": "completed", "requests": [req(0.3, 6, 1, [3, 4], 0.2)], "models": ["model"]},
    req(1.0, 9, 1, [1, 2, 5]),
    {"t": 1.2, "type": "subagent", "agent_id": "bg", "subagent_type": "Explore",
     "status": "async_launched", "requests": [req(1.2, 4, 0, [9], 0.1)], "models": ["model"]},
    req(1.5, 13, 1, [1, 2, 5, 6]),
])


def edges(rows):
    return {sid: [(e[0], e[1], e[2], e[3]) for e in deps] for sid, _, _, _, deps in rows}


def test_overlapping_child_join_and_background_lower_as_the_reference_does():
    rows = lower_play(parse_play(OVERLAP), "t.json", relative=False)
    assert [r[0] for r in rows] == ["outer:0", "outer:1:inner:0", "outer:2", "outer:3:inner:0", "outer:4"]
    assert [r[3] for r in rows] == [0.0, 300.0, 1000.0, 1200.0, 1500.0]  # not_before_ms
    e = edges(rows)
    assert e["outer:0"] == []
    # the child started before its parent's recorded end: dispatch-triggered, 300 ms after it
    assert e["outer:1:inner:0"] == [("outer:0", True, 300.0, "spawn")]
    # the parent's next request waits for the parent (0 ms after its end) and joins the child
    # (1000 - (300 + 200) = 500 ms after its end)
    assert ("outer:0", False, 0.0, "sequence") in e["outer:2"]
    assert ("outer:1:inner:0", False, 500.0, "join") in e["outer:2"]
    assert e["outer:3:inner:0"] == [("outer:2", False, 200.0, "spawn")]
    assert not any(src == "outer:3:inner:0" and rel == "join" for d in e.values() for src, _, _, rel in d)
    assert [r[2].out for r in rows] == [1, 1, 1, 0, 1]


def test_post_completion_spawn_and_sequence_inside_a_subagent():
    p = play([
        req(0.0, 8, 1, [1, 2], 0.5),
        {"t": 0.9, "type": "subagent", "agent_id": "a", "subagent_type": "Explore", "duration_ms": 300,
         "status": "completed", "requests": [req(0.9, 8, 1, [3, 4], 0.2), req(1.15, 12, 1, [3, 4, 5], 0.05)]},
        req(1.2, 12, 1, [1, 2, 6]),
    ])
    e = edges(lower_play(parse_play(p), "t.json", relative=False))
    assert e["outer:1:inner:0"] == [("outer:0", False, 400.0, "spawn")]
    assert ("outer:1:inner:0", False, 50.0, "sequence") in e["outer:1:inner:1"]
    assert ("outer:1:inner:1", False, 0.0, "join") in e["outer:2"]


def test_a_replay_releases_the_child_300_ms_after_its_parent_dispatch(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(OVERLAP))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("engine: {block_size: 4, num_gpu_blocks: 1000}\n"
                   f"workload:\n  trace: {{path: {path}, format: weka}}\n")
    res = simulate(load_config(str(cfg), [], Plugins()))
    out = {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}
    # the reference's report on this file with these settings (Dynamo 1.6.1)
    assert [out[i]["arrival_ms"] for i in range(5)] == [0.0, 300.0, 1000.0, 1216.516604, 1516.516604]
    assert [out[i]["completion_ms"] for i in range(5)] == [
        16.622914, 316.592536, 1016.516604, 1233.078764, 1533.093952]
    assert [out[i]["cached_tokens"] for i in range(5)] == [0, 0, 8, 0, 8]


def test_nested_timestamp_bases(tmp_path):
    rel = play([req(0.0, 8, 1, [1, 2], 0.1),
                {"t": 0.5, "type": "subagent", "agent_id": "a", "subagent_type": "x",
                 "status": "async_launched", "requests": [req(0.0, 4, 1, [7]), req(0.2, 8, 1, [7, 8])]}])
    path = tmp_path / "rel.jsonl"
    path.write_text(json.dumps(rel) + "\n")
    auto = WekaTrace.read(str(path))  # a nested request before its marker: relative
    starts = sorted(s.start_ms for s in auto.sessions)
    assert starts == [0.0, 500.0, 700.0]
    assert sorted(s.start_ms for s in WekaTrace.read(
        str(path), options={"nested_timestamp_basis": "relative"}).sessions) == starts
    with pytest.raises(TraceError) as info:
        WekaTrace.read(str(path), options={"nested_timestamp_basis": "absolute"})
    assert str(info.value).startswith(f"{path}:1:") and "'requests[1].requests[0].t'" in str(info.value)


def test_prompts_share_full_blocks_within_a_play_only(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(play([req(0.0, 10, 1, [1, 2, 3])], "a")) + "\n"
                    + json.dumps(play([req(0.0, 8, 1, [1, 2])], "b")) + "\n")
    w = WekaTrace.read(str(path))
    a, b = (s.turns[0].prompt for s in w.sessions)
    ids = {len(p): p.hash_ids for p in (a, b)}
    assert len(ids[10]) == 3 and len(ids[8]) == 2  # 2 full blocks + a private partial one
    assert set(ids[10]).isdisjoint(ids[8])  # same source hashes, different plays


def test_a_folder_is_read_in_path_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.json").write_text(json.dumps(play([req(0.0, 8, 1, [1, 2])], "x")))
    (tmp_path / "b" / "c.jsonl").write_text(json.dumps(play([req(0.0, 8, 1, [1, 2])], "y")) + "\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert len(WekaTrace.read(str(tmp_path)).sessions) == 2


@pytest.mark.parametrize(("trace", "field"), [
    (play([{"type": "s", "model": "model", "in": 4, "out": 1}]), "requests[0].t"),
    (play([req(0.0, 0, 1, [1])]), "requests[0].in"),
    (play([req(0.0, 4, 1, [1]), {"t": 0.1, "type": "subagent", "agent_id": "a", "subagent_type": "x",
                                 "status": "failed", "requests": []}]), "requests[1].status"),
    (play([req(0.0, 4, 1, [1]), {"t": 0.1, "type": "subagent", "agent_id": "a", "subagent_type": "x",
                                 "status": "completed", "requests": []}]), "requests[1].requests"),
    (play([{"t": 0.0, "type": "q"}]), "requests[0].type"),
    (dict(play([req(0.0, 4, 1, [1])]), hash_id_scope="global"), "hash_id_scope"),
    (dict(play([req(0.0, 4, 1, [1])]), models=["other"]), "models"),
    (play([req(-1.0, 4, 1, [1])]), "requests[0].t"),
])
def test_a_malformed_play_names_file_line_and_field(tmp_path, trace, field):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(play([req(0.0, 4, 1, [1])], "ok")) + "\n" + json.dumps(trace) + "\n")
    with pytest.raises(TraceError) as info:
        WekaTrace.read(str(path))
    assert str(info.value).startswith(f"{path}:2:") and f"'{field}'" in str(info.value)


def test_corpus_errors(tmp_path):
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(play([req(0.0, 4, 1, [1])])) + "\n"
                     + json.dumps(play([req(0.0, 8, 1, [1])], block=8)) + "\n")
    with pytest.raises(TraceError, match="block_size"):
        WekaTrace.read(str(mixed))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(TraceError) as info:
        WekaTrace.read(str(bad))
    assert info.value.line == 1
    with pytest.raises(TraceError, match="must end in .json or .jsonl"):
        WekaTrace.read(str(tmp_path / "x.txt"))
    with pytest.raises(ConfigError) as cfg:
        WekaTrace.read(str(mixed), options={"nested_timestamp_basis": "sideways"})
    assert cfg.value.path == "workload.trace.options.nested_timestamp_basis"
    with pytest.raises(ConfigError) as cfg:
        WekaTrace.read(str(mixed), options={"lanes": 2})
    assert cfg.value.path == "workload.trace.options.lanes"
