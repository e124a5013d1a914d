"""A trace read as a stream (servesim.workload.streamed) replays exactly as the same trace
held whole, reads its file once more for the replay (twice with prefix-cache marks), and
holds about what is in flight."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_toy import make_factory
from servesim.config.sections import ReportConfig
from servesim.errors import TraceError
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.testing.strategies import mooncake_lines
from servesim.workload.model import _marks, _marks_in_arrays, mark_unique_prompts
from servesim.workload.mooncake import MooncakeTrace
from servesim.workload.streamed import StreamedWorkload


def held(lines: list[str], tb: int = 4) -> Any:
    return MooncakeTrace.parse_lines(lines, "t.jsonl", tb)


def streamed(lines: list[str], tb: int = 4) -> Any:
    return MooncakeTrace.stream_lines(lambda: iter(lines), "t.jsonl", tb)


def run(workload: Any, marks: bool = False, workers: int = 2, **kw: Any) -> tuple[str, list[str], Replayer]:
    if marks:
        mark_unique_prompts(workload)
    rp = Replayer(build_engines(make_factory().build, workers), workload, block_size=4,
                  router=KvRouter(workers, 1, 4), **kw)
    log = rp.run()
    return dumps(build_report(log, ReportConfig())), list(per_request_lines(log, rp.session_of)), rp


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=mooncake_lines(), marks=st.booleans(),
       mode=st.sampled_from(["timestamp", "concurrency", "max_concurrency", "speedup"]))
def test_a_streamed_trace_replays_as_the_held_one(lines: list[str], mode: str, marks: bool) -> None:
    kw = {"timestamp": {}, "concurrency": {"concurrency": 2}, "max_concurrency": {"max_concurrency": 2},
          "speedup": {"arrival_speedup_ratio": 2.5}}[mode]
    report, records, _ = run(held(lines), marks, **kw)
    workload = streamed(lines)
    assert isinstance(workload, StreamedWorkload)
    got, got_records, rp = run(workload, marks, **kw)
    assert (got, got_records) == (report, records)
    trace = workload.trace
    assert trace.passes == 1 + marks and rp.turns.rereads == 0 and rp.turns.held == 0


@settings(max_examples=40, derandomize=True, deadline=None)
@given(times=st.lists(st.sampled_from([0, 3, 3, 10, 40, 41, 90]), min_size=2, max_size=12),
       speedup=st.sampled_from([1.0, 3.0]))
def test_first_turns_out_of_time_order_replay_as_held(times: list[int], speedup: float) -> None:
    lines = [json.dumps({"timestamp": t, "hash_ids": [i % 3, 100 + i], "output_length": 5 + i})
             for i, t in enumerate(times)]
    assert run(streamed(lines), arrival_speedup_ratio=speedup)[:2] == run(
        held(lines), arrival_speedup_ratio=speedup)[:2]


def test_the_columns_match_the_held_trace() -> None:
    lines = [json.dumps(r) for r in (
        {"timestamp": 5, "hash_ids": [1, 2], "output_length": 3, "session_id": "a"},
        {"timestamp": 1, "hash_ids": [3], "output_length": 2, "lora": "x"},
        {"timestamp": 9, "hash_ids": [1], "output_length": 4, "session_id": "a"},
        {"hash_ids": [4], "output_length": 1, "session_id": "request_2", "delay": 3},
        {"timestamp": 2, "hash_ids": [5], "output_length": 1, "session_id": "request_6"},
        {"timestamp": 3, "hash_ids": [6], "output_length": 1, "priority": -2, "lora": 4},
    )]
    whole, lazy = held(lines), streamed(lines)
    assert lazy.num_requests == whole.num_requests == 6
    assert [list(c) for c in lazy.session_columns()] == [list(c) for c in whole.session_columns()]
    assert [list(c) for c in lazy.request_columns()] == [list(c) for c in whole.request_columns()]
    assert [list(c) for c in lazy.first_turn_columns()] == [list(c) for c in whole.first_turn_columns()]
    # line 4 names line 2's default session, line 6 joins the session line 5 named after it
    assert list(lazy.session_columns()[0]) == ["a", "request_2", "a", "request_2", "request_6", "request_6"]
    assert lazy.lora_names == whole.lora_names == {"x": [1]}
    assert [(t.request_id, t.delay_ms, t.line, t.priority, t.lora) for t in lazy.turns()] == [
        (t.request_id, t.delay_ms, t.line, t.priority, t.lora) for t in whole.turns()]
    assert [(s.session_id, s.start_ms, [t.request_id for t in s.turns]) for s in lazy.held().sessions] == [
        (s.session_id, s.start_ms, [t.request_id for t in s.turns]) for s in whole.sessions]


def test_a_resolved_adapter_name_reaches_the_requests_read_afterwards() -> None:
    lines = [json.dumps({"timestamp": i, "hash_ids": [i], "output_length": 1, "lora": "x"}) for i in range(2)]
    lazy = streamed(lines)
    lazy.set_adapter("x", [0, 1], 7)
    assert [t.lora for t in lazy.turns()] == [7, 7] and list(lazy.request_columns()[2]) == [7, 7]


def test_a_streamed_trace_is_checked_whole_before_the_replay() -> None:
    lines = [json.dumps({"timestamp": 0, "hash_ids": [1], "output_length": 1}), '{"hash_ids": [2]}']
    with pytest.raises(TraceError, match=r"t.jsonl:2: missing required field 'output_length'"):
        streamed(lines)
    lines = [json.dumps({"timestamp": 0, "hash_ids": [1], "output_length": 1}),
             json.dumps({"hash_ids": [2], "output_length": 1})]
    with pytest.raises(TraceError, match=r"t.jsonl:2: timestamp mode needs a 'timestamp'"):
        run(streamed(lines))


def test_the_reader_holds_about_what_is_in_flight() -> None:
    # 400 requests, 10 ms apart: a few dozen in flight at most
    lines = [json.dumps({"timestamp": 10 * i, "hash_ids": [i], "output_length": 20}) for i in range(400)]
    workload = streamed(lines)
    most = [0]
    rp = Replayer(build_engines(make_factory().build, 1), workload, block_size=4)
    release = rp.turns.release

    def watch(rid: int) -> None:
        most[0] = max(most[0], rp.turns.held)
        release(rid)

    rp.turns.release = watch
    rp.run()
    assert rp.log.max_in_flight <= most[0] <= rp.log.max_in_flight + 1 <= 40
    assert rp.turns.held == 0 and rp.turns.rereads == 0


@settings(max_examples=200, derandomize=True, deadline=None)
@given(prompts=st.lists(st.tuples(st.lists(st.integers(-3, 9), min_size=1, max_size=5), st.integers(1, 40)),
                        min_size=1, max_size=8),
       tb=st.sampled_from([2, 4, 8]), wide=st.booleans())
def test_both_ways_of_marking_unique_blocks_agree(prompts: list, tb: int, wide: bool) -> None:
    from array import array

    ids, bounds, lengths = array("q"), array("q", [0]), array("q")
    for hash_ids, length in prompts:
        ids.extend([h + (1 << 33) * wide for h in hash_ids])
        bounds.append(len(ids))
        lengths.append(min(length, len(hash_ids) * tb))
    wide = wide or min(ids) < 0
    in_lists = list(_marks(ids, bounds, lengths, tb, wide))
    assert in_lists == list(_marks_in_arrays(ids, bounds, lengths, tb, wide))


def test_a_pipe_is_held_whole_and_a_file_changed_under_the_replay_is_an_error(tmp_path) -> None:
    import os
    import threading

    body = "".join(json.dumps({"timestamp": i, "hash_ids": [i], "output_length": 2}) + "\n" for i in range(3))
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(body), daemon=True)  # never outlives a failure
    writer.start()
    workload = MooncakeTrace.stream(str(fifo), trace_block_size=4)
    writer.join(timeout=10)
    assert not isinstance(workload, StreamedWorkload) and workload.num_requests == 3

    path = tmp_path / "trace.jsonl"
    path.write_text(body)
    workload = MooncakeTrace.stream(str(path), trace_block_size=4)
    assert isinstance(workload, StreamedWorkload)
    path.write_text(body + body)
    with pytest.raises(TraceError, match="the trace changed while it was replayed"):
        run(workload)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(starts=st.lists(st.sampled_from([0.0, 2.5, 2.5, 7.0, 1e6, -3.0]), max_size=12),
       seq0=st.integers(0, 50), speedup=st.sampled_from([1.0, 0.7, 3.0]))
def test_first_turns_are_in_time_then_session_order(starts: list[float], seq0: int, speedup: float) -> None:
    from servesim.replay.first_turns import FirstTurns

    rids = [10 * i for i in range(len(starts))]
    base = min(starts, default=0.0)
    expected = sorted(((s - base) / speedup, seq0 + 1 + i, rids[i]) for i, s in enumerate(starts))
    ft = FirstTurns.of(starts, rids, seq0, speedup)
    assert [ft[i] for i in range(len(ft))] == expected == ft[0:len(ft)]


def test_slo_classes_and_priorities_reach_a_streamed_trace(tmp_path, monkeypatch) -> None:
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 5 * i, "hash_ids": [i % 4, 50 + i], "output_length": 3 + i % 7,
             **({"class": "batch"} if i % 5 == 0 else {}), **({"priority": 2} if i % 3 == 0 else {})}
            for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets = ["workload.synthetic=null", f"workload.trace.path={json.dumps(str(path))}",
            "workload.classes=[{name: chat, share: 2, priority: -1}, {name: batch, share: 1}]",
            "engine.scheduling_policy=priority", "engine.max_num_seqs=4"]

    def replay() -> tuple[dict, list[str]]:
        result = simulate(load_config(None, sets))
        return result.report, list(per_request_lines(result.log, result.session_ids))

    streamed_run = replay()
    monkeypatch.delattr(MooncakeTrace, "stream")
    assert replay() == streamed_run
    whole, lazy = held([json.dumps(r) for r in rows]), streamed([json.dumps(r) for r in rows])
    from servesim.config.workload_scope import SloClassConfig
    from servesim.workload.classes import assign_classes

    classes = (SloClassConfig(name="chat", share=2, priority=-1), SloClassConfig(name="batch", share=1))
    assert assign_classes(lazy, classes, 3) == assign_classes(whole, classes, 3)
    assert [t.priority for t in lazy.turns()] == [t.priority for t in whole.turns()]
    assert {t.priority for t in whole.turns()} == {-1, 0, 2}
