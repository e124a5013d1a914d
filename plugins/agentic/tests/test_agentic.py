"""servesim-agentic: the agentic_mooncake and dynamo_agent_trace readers, and their requests
released in simulated time after the requests they wait for (servesim.replay.release)."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError, TraceError
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines
from servesim_agentic.agentic_mooncake import AgenticMooncakeTrace
from servesim_agentic.dynamo_request import DynamoRequestTrace
from servesim_agentic.dynamo_trace import DynamoAgentTrace


def write(tmp_path, rows, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [
    {"request_id": "r1", "session_id": "root", "timestamp": 100, "input_length": 64, "output_length": 8,
     "hash_ids": [1, 2], "prefix_reset": True, "branches": ["c1"]},
    {"request_id": "c1", "session_id": "child", "timestamp": 150, "input_length": 32, "output_length": 4,
     "hash_ids": [9], "wait_for": ["r1"], "delay": 5},
    {"request_id": "r2", "session_id": "root", "timestamp": 300, "input_length": 96, "output_length": 8,
     "hash_ids": [1, 2, 3], "wait_for": ["r1", "c1"], "delay": 10, "tool_wait_ms": 6,
     "policy_class": "batch", "priority": 2},
    {"request_id": "x", "timestamp": 120, "input_length": 32, "output_length": 2, "hash_ids": [7]},
]

ROOT = {k: v for k, v in ROWS[0].items() if k != "branches"}


def replay(tmp_path, trace, fmt, sets=(), block=32):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload:\n  trace: {{path: {trace}, format: {fmt}, trace_block_size: {block}}}\n")
    res = simulate(load_config(str(cfg), list(sets), Plugins()))
    return res, {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}


def test_agentic_mooncake_rows_become_requests_with_dependencies(tmp_path):
    w = AgenticMooncakeTrace.read(write(tmp_path, ROWS), trace_block_size=32)
    turns = w.turns()
    assert [t.wait_for for t in turns] == [(), (0,), (0, 1), ()]
    assert [t.delay_ms for t in turns] == [0.0, 5.0, 16.0, 0.0]
    # a dependent's timestamp is kept as its authored start; it does not release it
    assert [s.start_ms for s in w.sessions] == [100.0, 150.0, 300.0, 120.0]
    assert [s.session_id for s in w.sessions] == ["root", "child", "root", "x"]
    assert turns[2].slo_class == "batch" and turns[2].priority == 2
    assert [t.input_length for t in turns] == [64, 32, 96, 32]


def test_a_row_is_released_after_its_last_dependency_plus_delay_and_tool_wait(tmp_path):
    _, out = replay(tmp_path, write(tmp_path, ROWS), "agentic_mooncake")
    r1, c1, r2, x = (out[i] for i in range(4))
    assert r1["arrival_ms"] == 0.0 and x["arrival_ms"] == 20.0  # roots at their rebased timestamps
    assert c1["arrival_ms"] == pytest.approx(r1["completion_ms"] + 5.0, abs=1e-6)
    assert r2["arrival_ms"] == pytest.approx(max(r1["completion_ms"], c1["completion_ms"]) + 16.0, abs=1e-6)
    assert (r2["session_id"], c1["session_id"]) == ("root", "child")
    # the speed-up divides root timestamps and dependency waits (the reference's test: 30/2, 16/2)
    _, fast = replay(tmp_path, write(tmp_path, ROWS), "agentic_mooncake",
                     ["workload.arrival_speedup_ratio=2"])
    assert fast[3]["arrival_ms"] == 10.0
    assert fast[2]["arrival_ms"] == pytest.approx(
        max(fast[0]["completion_ms"], fast[1]["completion_ms"]) + 8.0, abs=1e-6)


def test_dependencies_with_warmup_classes_and_a_stop(tmp_path):
    trace = write(tmp_path, ROWS)
    res, out = replay(tmp_path, trace, "agentic_mooncake", [
        "workload.classes=[{name: interactive, share: 1}, {name: batch, share: 0}]",
        "workload.warmup.requests=1"])
    assert set(out) == {1, 2, 3} and out[2]["class"] == "batch" and out[1]["class"] == "interactive"
    with pytest.raises(ConfigError) as info:
        replay(tmp_path, trace, "agentic_mooncake", ["workload.concurrency=2"])
    assert info.value.path == "workload.concurrency"


@pytest.mark.parametrize(("row", "field"), [
    ({"hash_ids": [1], "output_length": 1}, "request_id"),
    ({"request_id": "a", "hash_ids": [], "output_length": 1}, "hash_ids"),
    ({"request_id": "a", "hash_ids": [1]}, "output_length"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "wait_for": "r1"}, "wait_for"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "wait_for": ["nope"]}, "wait_for"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "branches": ["nope"]}, "branches"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "tool_wait_ms": -1}, "tool_wait_ms"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "prefix_reset": 1}, "prefix_reset"),
    ({"request_id": "r1", "hash_ids": [1], "output_length": 1}, "request_id"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "wait_for": ["a"]}, "wait_for"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "output_tokens": 1}, "output_tokens"),
    ({"request_id": "a", "hash_ids": [1], "output_length": 1, "delay": 1, "delay_ms": 1}, "delay_ms"),
])
def test_a_malformed_line_names_file_line_and_field(tmp_path, row, field):
    path = write(tmp_path, [ROOT, row])
    with pytest.raises(TraceError) as info:
        AgenticMooncakeTrace.read(path, trace_block_size=32)
    assert info.value.line == 2 and f"'{field}'" in str(info.value)
    assert str(info.value).startswith(f"{path}:2:")


def test_a_dependency_cycle_is_refused(tmp_path):
    rows = [ROOT,
            {"request_id": "a", "hash_ids": [1], "output_length": 1, "wait_for": ["b"]},
            {"request_id": "b", "hash_ids": [1], "output_length": 1, "wait_for": ["a"]}]
    with pytest.raises(TraceError) as info:
        AgenticMooncakeTrace.read(write(tmp_path, rows), trace_block_size=32)
    assert info.value.line == 2 and "cycle" in str(info.value)


# -- dynamo_agent_trace: the converter's own cases (Dynamo's agent_trace_to_mooncake tests) ---

def request_end(rid, traj, start, end, hashes, parent=None, block=2):
    return {"event_type": "request_end", "event_time_unix_ms": end,
            "agent_context": {"session_id": "s", "trajectory_id": traj,
                              "parent_trajectory_id": parent},
            "request": {"request_id": rid, "output_tokens": 5, "request_received_ms": start,
                        "total_time_ms": end - start,
                        "replay": {"trace_block_size": block, "input_length": 2 * len(hashes),
                                   "input_sequence_hashes": hashes}}}


def read_dynamo(tmp_path, records, block=2):
    w = DynamoAgentTrace.read(write(tmp_path, records), trace_block_size=block)
    ids = [s.session_id for s in w.sessions]
    return w, ids


def test_dynamo_sequential_waits_and_tool_wait(tmp_path):
    records = [request_end("r1", "root", 1000, 1100, [11]),
               {"event": {"event_type": "tool_end", "event_time_unix_ms": 1250,
                          "agent_context": {"session_id": "s", "trajectory_id": "root"},
                          "tool": {"started_at_unix_ms": 1150, "ended_at_unix_ms": 1250}}},
               request_end("r2", "root", 1300, 1400, [11, 22])]
    w, _ = read_dynamo(tmp_path, records)
    t = w.turns()
    assert t[0].wait_for == () and t[1].wait_for == (0,)
    assert t[1].delay_ms == 200.0  # delay 100 + tool wait 100
    assert [s.start_ms for s in w.sessions] == [0.0, 300.0]
    assert list(t[0].prompt.hash_ids) == [0] and list(t[1].prompt.hash_ids) == [0, 1]  # dense, shared prefix


def test_dynamo_subagent_spawn_and_join(tmp_path):
    records = [request_end("parent-1", "root", 1000, 1100, [11]),
               request_end("child-1", "child", 1200, 1300, [33], parent="root"),
               request_end("parent-2", "root", 1500, 1600, [11, 22])]
    w, _ = read_dynamo(tmp_path, records)
    t = w.turns()
    assert t[1].wait_for == (0,)  # child waits for parent-1
    assert t[2].wait_for == (0, 1)  # parent-2 waits for parent-1 and child-1
    assert t[2].delay_ms == 200.0


def test_dynamo_join_on_the_last_finishing_child_and_conflicting_parents(tmp_path):
    records = [request_end("parent-1", "root", 1000, 1100, [11]),
               request_end("child-slow", "child", 1200, 1900, [33], parent="root"),
               request_end("child-fast", "child", 1300, 1400, [44], parent="root"),
               request_end("parent-2", "root", 1500, 1600, [11, 22]),
               request_end("parent-3", "root", 2000, 2100, [11, 22, 33])]
    w, _ = read_dynamo(tmp_path, records)
    t = w.turns()
    assert 2 not in t[3].wait_for  # parent-2 does not wait for child-fast
    assert 1 in t[4].wait_for  # parent-3 waits for child-slow
    bad = [request_end("c1", "child", 1000, 1100, [11], parent="root-a"),
           request_end("c2", "child", 1200, 1300, [22], parent="root-b")]
    with pytest.raises(TraceError) as info:
        read_dynamo(tmp_path, bad)
    assert info.value.line == 2 and "parent_trajectory_id" in str(info.value)
    with pytest.raises(TraceError) as info:
        read_dynamo(tmp_path, records, block=4)
    assert "trace_block_size" in str(info.value)


# -- applied_compute_agentic (Dynamo's Trace::from_applied_compute_agentic) --------------------

from servesim_agentic.applied_compute import AppliedComputeAgenticTrace  # noqa: E402

AC = [{"num_turns": 2, "input_prompt_length": 100, "assistant_response_length": [10, 20],
       "tool_call_output_length": [30, 40], "tool_call_latency": [0.5, 0.25],
       "final_assistant_response_length": 5},
      {"num_turns": 1, "input_prompt_length": 64, "assistant_response_length": [8],
       "tool_call_output_length": [16], "tool_call_latency": [1.0],
       "final_assistant_response_length": 4}]
TAG = 0xA63E_0000_0000_0000


def test_applied_compute_sessions_grow_turn_by_turn(tmp_path):
    w = AppliedComputeAgenticTrace.read(write(tmp_path, AC), trace_block_size=32)
    a, b = w.sessions
    assert a.session_id == "applied_compute_agentic_session_1" and a.start_ms is None
    assert [t.input_length for t in a.turns] == [100, 140, 200]
    assert [t.output_length for t in a.turns] == [10, 20, 5]
    assert [t.delay_ms for t in a.turns] == [0.0, 500.0, 250.0]
    assert [list(t.prompt.hash_ids) for t in a.turns] == [[1, 2, 3, 4], [1, 2, 3, 4, 5],
                                                          [1, 2, 3, 4, 5, 6, 7]]
    assert [list(t.prompt.hash_ids) for t in b.turns] == [[8, 9], [8, 9, 10]]
    assert [t.request_id for s in w.sessions for t in s.turns] == [0, 1, 2, 3, 4]


def test_applied_compute_shared_prefix_groups(tmp_path):
    opts = {"trace_shared_prefix_ratio": 0.5, "trace_num_prefix_groups": 2}
    w = AppliedComputeAgenticTrace.read(write(tmp_path, AC), trace_block_size=32, options=opts)
    a, b = w.sessions
    # ceil(100/32) = 4 blocks, half shared (group 0); ceil(64/32) = 2 blocks, 1 shared (group 1)
    assert list(a.turns[0].prompt.hash_ids) == [TAG | 0, TAG | 1, 1, 2]
    assert list(b.turns[1].prompt.hash_ids) == [TAG | (1 << 32), 6, 7]  # a used ids 1..5
    same = AppliedComputeAgenticTrace.read(write(tmp_path, AC), trace_block_size=32,
                                           options={"shared_prefix_ratio": 0.5, "num_prefix_groups": 2})
    assert [list(t.prompt.hash_ids) for t in same.turns()] == [list(t.prompt.hash_ids) for t in w.turns()]
    with pytest.raises(ConfigError) as info:
        AppliedComputeAgenticTrace.read(write(tmp_path, AC), trace_block_size=32,
                                        options={"shared_prefix_ratio": 2})
    assert info.value.path == "workload.trace.options.shared_prefix_ratio"
    with pytest.raises(ConfigError) as info:
        AppliedComputeAgenticTrace.read(write(tmp_path, AC), trace_block_size=32, options={"x": 1})
    assert info.value.path == "workload.trace.options.x"


@pytest.mark.parametrize(("change", "field"), [
    ({"tool_call_latency": [0.5]}, "tool_call_latency"),
    ({"input_prompt_length": 0}, "input_prompt_length"),
    ({"tool_call_latency": [0.5, -1]}, "tool_call_latency[1]"),
    ({"final_assistant_response_length": None}, "final_assistant_response_length"),
])
def test_applied_compute_malformed_line(tmp_path, change, field):
    path = write(tmp_path, [AC[1], {**AC[0], **change}])
    with pytest.raises(TraceError) as info:
        AppliedComputeAgenticTrace.read(path, trace_block_size=32)
    assert info.value.line == 2 and f"'{field}'" in str(info.value)


def test_applied_compute_replays_in_concurrency_mode_with_options_from_yaml(tmp_path):
    trace = write(tmp_path, AC)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload:\n  concurrency: 2\n  trace: {{path: {trace}, format: applied_compute_agentic, "
                   "trace_block_size: 32, options: {trace_shared_prefix_ratio: 0.5, "
                   "trace_num_prefix_groups: 2}}\n")
    res = simulate(load_config(str(cfg), [], Plugins()))
    out = {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}
    assert out[1]["arrival_ms"] == pytest.approx(out[0]["completion_ms"] + 500.0, abs=1e-6)
    assert out[4]["arrival_ms"] == pytest.approx(out[3]["completion_ms"] + 1000.0, abs=1e-6)
    assert res.report["config"]["workload"]["trace"]["options"] == {
        "trace_shared_prefix_ratio": 0.5, "trace_num_prefix_groups": 2}
    # without options the resolved trace section is as it always was
    res, _ = replay(tmp_path, write(tmp_path, ROWS), "agentic_mooncake")
    assert "options" not in res.report["config"]["workload"]["trace"]


# -- workload.lanes: at most N plays at once (AISimulate's agentic_lanes) ---------------------

LANES = [
    {"request_id": "a1", "timestamp": 0, "input_length": 64, "output_length": 8, "hash_ids": [1, 2]},
    {"request_id": "a2", "input_length": 96, "output_length": 8, "hash_ids": [1, 2, 3],
     "wait_for": ["a1"], "delay": 10},
    {"request_id": "b1", "timestamp": 5, "input_length": 64, "output_length": 8, "hash_ids": [5, 6]},
    {"request_id": "b2", "timestamp": 9, "input_length": 64, "output_length": 8, "hash_ids": [5, 7]},
    {"request_id": "b3", "input_length": 96, "output_length": 8, "hash_ids": [5, 6, 7],
     "wait_for": ["b1", "b2"]},
    {"request_id": "c1", "timestamp": 7, "input_length": 64, "output_length": 8, "hash_ids": [8, 9]},
]


def test_one_lane_runs_the_plays_one_after_another(tmp_path):
    _, out = replay(tmp_path, write(tmp_path, LANES), "agentic_mooncake", ["workload.lanes=1"])
    a1, a2, b1, b2, b3, c1 = (out[i] for i in range(6))
    assert a1["arrival_ms"] == 0.0
    assert a2["arrival_ms"] == pytest.approx(a1["completion_ms"] + 10.0, abs=1e-6)
    # play b (roots b1, b2 joined by b3) starts when play a is done; b2 keeps its 4 ms offset
    assert b1["arrival_ms"] == a2["completion_ms"]
    assert b2["arrival_ms"] == pytest.approx(b1["arrival_ms"] + 4.0, abs=1e-6)
    assert b3["arrival_ms"] == max(b1["completion_ms"], b2["completion_ms"])
    assert c1["arrival_ms"] == b3["completion_ms"]


def test_two_lanes_start_two_plays_and_refill(tmp_path):
    _, out = replay(tmp_path, write(tmp_path, LANES), "agentic_mooncake", ["workload.lanes=2"])
    assert out[0]["arrival_ms"] == 0.0 and out[2]["arrival_ms"] == 0.0 and out[3]["arrival_ms"] == 4.0
    first_done = min(out[1]["completion_ms"], out[4]["completion_ms"])
    assert out[5]["arrival_ms"] == first_done


def test_lanes_need_a_dependency_graph_and_exclude_concurrency(tmp_path):
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(json.dumps({"timestamp": 0, "output_length": 2, "hash_ids": [1]}) + "\n")
    with pytest.raises(ConfigError) as info:
        replay(tmp_path, str(mooncake), "mooncake", ["workload.lanes=2"])
    assert info.value.path == "workload.lanes"
    with pytest.raises(ConfigError) as info:
        replay(tmp_path, write(tmp_path, LANES), "agentic_mooncake",
               ["workload.lanes=2", "workload.concurrency=2"])
    assert info.value.path == "workload.lanes"


# -- the trace-format check kit (servesim.testing) ---------------------------------------------

from servesim.testing import check_trace_format  # noqa: E402
from servesim.testing.trace_kit import TRACE_CHECKS  # noqa: E402


@pytest.mark.parametrize(("reader", "good", "bad", "block"), [
    (AgenticMooncakeTrace, ROWS, [ROOT, {"request_id": "a", "hash_ids": [1]}], 16),
    (AppliedComputeAgenticTrace, AC, [AC[0], {"num_turns": 1}], 16),
    (DynamoAgentTrace, [request_end("r1", "root", 1000, 1100, [11]),
                        request_end("r2", "root", 1300, 1400, [11, 22])],
     [request_end("r1", "root", 1000, 1100, [11]), {"event_type": "request_end", "request": {}}], 2),
])
def test_the_readers_pass_the_trace_format_kit(tmp_path, reader, good, bad, block):
    report = check_trace_format(reader, write(tmp_path, good, "good.jsonl"),
                                write(tmp_path, bad, "bad.jsonl"), trace_block_size=block)
    assert report.ok and report.checks == list(TRACE_CHECKS)  # streams_as_read: no stream, nothing to compare


@pytest.mark.parametrize("reader", [AgenticMooncakeTrace, DynamoAgentTrace,
                                    AppliedComputeAgenticTrace, DynamoRequestTrace])
@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read"),
])
def test_a_line_that_is_not_readable_json_names_its_line(tmp_path, reader, text, message):
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + text + "\n")
    with pytest.raises(TraceError) as info:
        reader.read(str(path))
    assert str(info.value) == f"{path}:2: {message}"
