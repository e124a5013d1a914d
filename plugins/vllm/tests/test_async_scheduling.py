"""``engine.vllm.async_scheduling``: vLLM's engine-core loop reads a new request one pass late
while passes overlap (servesim_vllm.async_scheduling, servesim.mechanics.overlap_inbox).

Fixed timing throughout: a pass with a prefill takes 10 ms plus 2 ms when it also decodes, a
decode-only pass 2 ms.
"""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.contract import APPLIED, CancelRequest, Submit
from servesim.errors import CommandRejected, ConfigError
from servesim.replay.runner import simulate
from servesim.report.summary import dumps
from servesim.testing.driver import drive
from servesim_vllm.config import VllmConfig
from vllm_helpers import make_engine, req

ASYNC = VllmConfig(async_scheduling=True)


def _first_tokens(arrivals, backend_config=None, **drive_kw):
    eng = make_engine(block_size=16, num_gpu_blocks=100, backend_config=backend_config)
    result = drive(eng, arrivals, **drive_kw)
    return {rid: t.token_times for rid, t in result.requests.items()}, result


def test_a_request_to_an_idle_engine_is_scheduled_at_once() -> None:
    arrivals = [(5.0, req(1, 32, 3))]
    on, _ = _first_tokens(arrivals, ASYNC)
    off, _ = _first_tokens(arrivals)
    assert on == off == {1: [15.0, 17.0, 19.0]}


def test_a_request_arriving_while_a_pass_runs_joins_the_pass_after_next() -> None:
    """Request 2 arrives at 3 ms, during request 1's prefill pass [0, 10]: the pass starting at
    10 was chosen at 0 ms, so it only decodes request 1 [10, 12]; request 2's prefill is the
    pass at 12 ms (first token 24, where without the option it is 22). Request 3 arrives at
    12 ms, the instant a pass starts: not read for the pass after it (24 ms) but the one at
    26 ms (first token 38; 34 without the option)."""
    arrivals = [(0.0, req(1, 32, 5)), (3.0, req(2, 32, 3)), (12.0, req(3, 32, 3))]
    on, result = _first_tokens(arrivals, ASYNC)
    assert on == {1: [10.0, 12.0, 24.0, 26.0, 38.0], 2: [24.0, 26.0, 38.0], 3: [38.0, 40.0, 42.0]}
    assert [(p.started_at_ms, p.end_ms) for p in result.passes] == [
        (0.0, 10.0), (10.0, 12.0), (12.0, 24.0), (24.0, 26.0), (26.0, 38.0), (38.0, 40.0),
        (40.0, 42.0)]
    off, _ = _first_tokens(arrivals)
    assert off == {1: [10.0, 22.0, 34.0, 36.0, 38.0], 2: [22.0, 34.0, 36.0], 3: [34.0, 36.0, 38.0]}


def test_an_unread_request_waits_unseen_by_the_scheduler_and_keeps_the_rank_busy() -> None:
    eng = make_engine(block_size=16, num_gpu_blocks=100, backend_config=ASYNC)
    eng.apply(0, Submit(req(1, 32, 5)), 0.0)
    started = eng.execute_pass(0.0)
    effects = eng.apply(0, Submit(req(2, 32, 3)), 3.0)
    # vLLM's scheduler statistics count the scheduler's queues, not the input queue.
    assert effects.metrics.waiting_requests == 0 and effects.metrics.running_requests == 1
    with pytest.raises(CommandRejected, match="request 2 is already active"):
        eng.apply(0, Submit(req(2, 32, 3)), 4.0)
    eng.complete_pass(started.pass_id, started.end_ms)
    assert eng.is_ready() and not eng.is_drained()
    second = eng.execute_pass(10.0)  # decodes request 1 only
    done = eng.complete_pass(second.pass_id, second.end_ms)
    assert done.by_rank[0].effects.outputs.token_request_ids == [1]
    assert done.by_rank[0].effects.metrics.waiting_requests == 0
    third = eng.execute_pass(12.0)  # request 2 is read now
    assert [a.request_id for a in third.by_rank[0].effects.admissions] == [2]


def test_cancelling_an_unread_request_removes_it() -> None:
    arrivals = [(0.0, req(1, 32, 5)), (3.0, req(2, 32, 3))]
    cancel = [(5.0, 0, CancelRequest(2))]
    tokens, result = _first_tokens(arrivals, ASYNC, extra_commands=cancel)
    assert tokens == {1: [10.0, 12.0, 14.0, 16.0, 18.0], 2: []}
    cancelled = result.command_effects[-1]
    assert cancelled.result is APPLIED and cancelled.retired_requests == (2,)
    assert [(p.started_at_ms, p.end_ms) for p in result.passes][-1] == (16.0, 18.0)


def test_a_run_of_passes_gives_the_stepped_times() -> None:
    """Runs of decode passes (servesim_vllm.fast.runs) are declined while a request is unread
    and keep their last pass's bounds for the rule: the same tokens as stepping."""
    arrivals = [(0.0, req(1, 32, 12)), (15.0, req(2, 32, 3)), (31.0, req(3, 32, 2))]
    stepped, _ = _first_tokens(arrivals, ASYNC)
    ran, result = _first_tokens(arrivals, ASYNC, runs=True)
    assert result.runs and ran == stepped
    # Request 2 arrives during the decode pass [14, 16]: the pass at 16 was chosen at 14, so
    # it joins the one at 18.
    assert stepped[2] == [30.0, 32.0, 34.0]
    assert stepped[1][:6] == [10.0, 12.0, 14.0, 16.0, 18.0, 30.0]


def test_each_data_parallel_rank_reads_by_its_own_loop() -> None:
    """dp_size 2, passes in lockstep: rank 1 has nothing to run when request 3 arrives (4 ms),
    so it reads it for the group pass at 10 ms; rank 0 is decoding request 1, so request 2
    (3 ms, during the pass [0, 10]) misses the pass at 10 and prefills in the one at 20."""
    eng = make_engine(block_size=16, num_gpu_blocks=100, dp_size=2, backend_config=ASYNC)
    result = drive(eng, [(0.0, req(1, 32, 5), 0), (3.0, req(2, 32, 3), 0),
                         (4.0, req(3, 32, 3), 1)])
    assert {rid: t.token_times for rid, t in result.requests.items()} == {
        1: [10.0, 20.0, 32.0, 34.0, 36.0], 2: [32.0, 34.0, 36.0], 3: [20.0, 32.0, 34.0]}
    assert [(p.started_at_ms, p.end_ms, [b.dp_rank for b in p.by_rank]) for p in result.passes] == [
        (0.0, 10.0, [0]), (10.0, 20.0, [0, 1]), (20.0, 32.0, [0, 1]), (32.0, 34.0, [0, 1]),
        (34.0, 36.0, [0])]


def _trace(tmp_path, outputs: list[int]) -> str:
    path = tmp_path / "closed.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": 0, "input_length": 32, "output_length": n,
                    "hash_ids": [1000 + 2 * i, 1001 + 2 * i]}) + "\n"
        for i, n in enumerate(outputs)))
    return str(path)


def _closed_loop(tmp_path, *sets: str):
    trace = _trace(tmp_path, [2, 8, 2, 2, 2, 2])
    return simulate(load_config(None, [
        "engine.backend=vllm", "engine.block_size=16", "engine.num_gpu_blocks=1000",
        "engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}",
        f"workload.trace={{path: {trace}, trace_block_size: 16}}", "workload.concurrency=2",
        *sets]))


def test_a_closed_loop_request_joins_the_third_pass_after_the_completion_it_answers(
        tmp_path, monkeypatch) -> None:
    """Concurrency 2, request 1 decoding 8 tokens while short requests follow each other:
    request 0 completes at the end of the pass [10, 12] and request 2 arrives then; the passes
    at 12 and 14 were chosen before it, so its prefill is the pass at 16 (first token 28, not
    24). Request 3 answers request 2's completion at 30 while request 1 still runs: passes
    at 30 and 32 go by, request 1 finishes at 34, and an engine with nothing left reads at
    once: requests 3 and 4 prefill together at 34."""
    on = _closed_loop(tmp_path, "engine.vllm.async_scheduling=true")
    assert on.log.arrival == [0.0, 0.0, 12.0, 30.0, 34.0, 46.0]
    assert on.log.first == [10.0, 10.0, 28.0, 44.0, 44.0, 56.0]
    assert on.log.done == [12.0, 34.0, 30.0, 46.0, 46.0, 58.0]
    off = _closed_loop(tmp_path)
    assert off.log.arrival == [0.0, 0.0, 12.0, 26.0, 40.0, 54.0]
    assert off.log.first == [10.0, 10.0, 24.0, 38.0, 52.0, 64.0]
    monkeypatch.setenv("SERVESIM_RUNS", "0")  # stepping every pass gives the same times
    stepped = _closed_loop(tmp_path, "engine.vllm.async_scheduling=true")
    assert stepped.log.first == on.log.first and stepped.log.done == on.log.done


def test_the_option_off_reports_as_without_the_key(tmp_path) -> None:
    without = _closed_loop(tmp_path)
    off = _closed_loop(tmp_path, "engine.vllm.async_scheduling=false")
    assert dumps(off.report) == dumps(without.report)
    echoed = load_config(None, ["engine.backend=vllm"]).resolved()["engine"]["vllm"]
    assert "async_scheduling" not in echoed
    on = load_config(None, ["engine.vllm.async_scheduling=true"]).resolved()["engine"]["vllm"]
    assert on["async_scheduling"] is True


def test_a_decode_worker_refuses_the_option_with_its_key_path(tmp_path) -> None:
    """A split's decode workers take their requests by KV handoff, whose lag is not modelled:
    the option is refused there (when the split's engines are built), and a prefill worker
    may keep it. Here the prefill worker finishes each prompt in one pass, so its loop has
    nothing left whenever a request arrives and reads it at once: the times without the
    option."""
    sets = ["cluster.prefill_workers=1", "cluster.decode_workers=1"]
    with pytest.raises(ConfigError) as info:
        _closed_loop(tmp_path, *sets, "engine.vllm.async_scheduling=true")
    assert info.value.path == "cluster.decode_engine.vllm.async_scheduling"
    assert "not modelled on a decode worker" in str(info.value)
    split = _closed_loop(tmp_path, *sets, "engine.vllm.async_scheduling=true",
                         "cluster.decode_engine.vllm.async_scheduling=false")
    assert split.log.arrival == [0.0, 0.0, 14.0, 26.0, 28.0, 40.0]
    assert split.log.first == [12.0, 12.0, 26.0, 38.0, 48.0, 58.0]
    without = _closed_loop(tmp_path, *sets)
    assert split.log.first == without.log.first and split.log.done == without.log.done
