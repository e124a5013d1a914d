"""``dynamo_request_trace``: Dynamo's request trace lowered as the reference lowers it (its
own examples: ``DynamoRequestTrace`` tests), and errors naming the file, line and field."""

from __future__ import annotations

import json

import pytest
from servesim.errors import TraceError
from servesim.workload.model import EdgeTurn
from servesim_agentic.dynamo_request import DynamoRequestTrace

S = "dynamo.request.trace.v1"


def request(rid, start, session=None, parent=None, dur=10):
    rec = {"schema": S, "event_type": "request_end", "event_time_unix_ms": start + dur,
           "request": {"request_id": rid, "output_tokens": 2, "request_received_ms": start,
                       "total_time_ms": dur, "replay": {"trace_block_size": 4, "input_length": 4,
                                                        "input_sequence_hashes": [11]}}}
    if session is not None:
        rec["agent_context"] = {"session_id": session}
        if parent is not None:
            rec["agent_context"]["parent_session_id"] = parent
    return rec


def tool(source, consumer, child, mode="blocking"):
    return {"schema": S, "event_type": "tool_end", "event_time_unix_ms": 115,
            "agent_context": {"session_id": "parent"},
            "tool": {"tool_call_id": "tool-1", "tool_class": "agent", "started_at_unix_ms": 110,
                     "ended_at_unix_ms": 115, "claude": {"source_request_id": source,
                                                         "consumer_request_id": consumer,
                                                         "child_session_id": child,
                                                         "execution_mode": mode}}}


def read(tmp_path, records):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return DynamoRequestTrace.read(str(path)), path


def edges(w):
    """request line -> [(source line, on dispatch, delay)] and line -> not_before_ms."""
    turns = [t for s in w.sessions for t in s.turns]
    line = {t.request_id: t.line for t in turns}
    return ({t.line: sorted((line[s], d, ms) for s, d, ms in t.edges) for t in turns},
            {t.line: t.not_before_ms for t in turns})


def test_plain_requests_are_sessions_at_their_start(tmp_path):
    w, _ = read(tmp_path, [request("b", 120), request("a", 100)])
    assert [(s.session_id, s.start_ms) for s in w.sessions] == [("a", 0.0), ("b", 20.0)]
    assert not any(isinstance(t, EdgeTurn) for s in w.sessions for t in s.turns)


def test_blocking_child_named_by_a_tool(tmp_path):
    w, _ = read(tmp_path, [request("parent-source", 100, "parent"),
                           tool("parent-source", "parent-consumer", "child"),
                           request("child-first", 120, "child", "parent"),
                           request("child-last", 150, "child", "parent"),
                           request("parent-consumer", 200, "parent")])
    e, nb = edges(w)
    assert e[3] == [(1, True, 20.0)]  # child-first: dispatch-spawned 20 ms after the source
    assert e[4] == [(3, False, 20.0)]  # its sequence
    assert e[5] == [(1, False, 90.0), (4, False, 40.0)]  # sequence and the join
    assert nb == {1: 0.0, 3: 0.0, 4: 0.0, 5: 0.0}


def test_background_child_has_no_join_and_a_time_found_child_does(tmp_path):
    w, _ = read(tmp_path, [request("p0", 100, "parent"), tool("p0", None, "child", "background"),
                           request("c", 120, "child", "parent"), request("p1", 130, "parent")])
    e, _ = edges(w)
    assert e[3] == [(1, True, 20.0)] and e[4] == [(1, False, 20.0)]
    w, _ = read(tmp_path, [request("p0", 100, "parent"), request("c0", 120, "child", "parent"),
                           request("c1", 150, "child", "parent"), request("p1", 200, "parent")])
    e, _ = edges(w)
    assert e[2] == [(1, True, 20.0)] and (3, False, 40.0) in e[4]


def test_missing_duration_ends_at_the_event_time(tmp_path):
    first = request("a", 100, "s")
    first["event_time_unix_ms"] = 150
    del first["request"]["total_time_ms"]
    w, _ = read(tmp_path, [first, request("b", 160, "s")])
    e, _ = edges(w)
    assert e[2] == [(1, False, 10.0)]


@pytest.mark.parametrize(("records", "line", "field"), [
    ([dict(request("a", 100), schema="v0")], 1, "schema"),
    ([{"schema": S, "event_type": "request_start"}], 1, "event_type"),
    ([request("a", 100), request("a", 120)], 2, "request.request_id"),
    ([request("a", 100, "s"), request("b", 120)], 2, "agent_context"),
    ([request("a", 100, "s"), tool("a", None, "c", "inline")], 2, "tool.claude.execution_mode"),
    ([request("a", 100, "parent"), tool("zz", None, "c")], 2, "tool.claude.source_request_id"),
    ([request("a", 100, "c", "p1"), request("b", 120, "c", "p2")], 2, "agent_context.parent_session_id"),
])
def test_a_bad_record_names_file_line_and_field(tmp_path, records, line, field):
    with pytest.raises(TraceError) as info:
        read(tmp_path, records)
    assert str(info.value).startswith(f"{tmp_path / 't.jsonl'}:{line}:") and f"'{field}'" in str(info.value)
