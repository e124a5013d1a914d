"""``servesim serve`` with ``lifecycle:``, ``planner:`` and ``faults:`` on a prefill/decode
split: a crashed decode worker's stream ends with vLLM's error event, ``/metrics`` counts the
workers of both pools by state, a ``schedule`` planner's decode worker serves live, the report
has the split's keys and ``elastic``; with the arrivals of a trace the server logs what
``servesim run`` logs; a client that leaves while its request waits for a decode worker
cancels it; one whose KV transfer fails ends with the error naming its decode worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from serve_helpers import WAIT_S, assert_engine_dead, start_stream_and_whole
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines
from servesim_serve.app import Server
from servesim_serve.cli import load
from servesim_serve.config import ServeConfig
from servesim_serve.elastic_driver import ENGINE_DEAD, LiveElasticSplitDriver
from servesim_serve.testing import running

# One prefill worker (0) and one decode worker (1); the planner adds decode worker 2 at 1 s,
# which starts for 1 s (it serves from 2 s on); worker 1 crashes at 2.5 s and restarts a
# minute later. Decode passes of 50 ms: a request of 1,000 tokens is still decoding then.
SPLIT = ["engine.timing_model={type: fixed, prefill_ms: 5.0, decode_ms: 50.0}", "serve.speedup=1",
         "cluster.prefill_workers=1", "cluster.decode_workers=1",
         "planner={type: schedule, interval_s: 100, steps: [{at_s: 1.0, workers: 2, pool: decode}]}",
         "lifecycle={startup_s: 1.0}",
         "faults={crashes: [{at_s: 2.5, worker: 1}], restart_s: 60.0}"]
STATES = ("starting", "warmup", "ready", "draining", "restarting", "stopped")


def workers_gauge(text: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith('servesim:workers{model_name="servesim",pool="'):
            pool = line.split('pool="', 1)[1].split('"', 1)[0]
            state = line.split('state="', 1)[1].split('"', 1)[0]
            out[(pool, state)] = float(line.rsplit(" ", 1)[1])
    return out


def gauge(**counts: int) -> dict[tuple[str, str], float]:
    """Every pool and state at 0 but ``counts`` (``pool_state=n``)."""
    out = {(pool, state): 0.0 for pool in ("prefill", "decode") for state in STATES}
    for key, n in counts.items():
        pool, state = key.split("_", 1)
        out[(pool, state)] = float(n)
    return out


def test_a_decode_crash_ends_streams_with_vllms_error_and_the_planners_worker_serves() -> None:
    with running(SPLIT) as s, httpx.Client(timeout=30) as c:
        driver = s.server.driver
        assert isinstance(driver, LiveElasticSplitDriver)
        before = workers_gauge(c.get(s.url + "/metrics").text)
        answers, threads = start_stream_and_whole(c, s.base)
        for t in threads:
            t.join(WAIT_S)
        rp = driver.replayer
        # Both arrived before the added decode worker served: both decoded on worker 1.
        assert all(r.arrival < 2000.0 for r in driver.requests)
        assert rp.records[1].state.value == "restarting"
        after = workers_gauge(c.get(s.url + "/metrics").text)
        later = c.post(s.base + "/completions", json={"prompt": "a b c", "max_tokens": 3})
        decode_workers = list(rp.decode_worker)
        report = s.server.report()
    assert before == gauge(prefill_ready=1, decode_ready=1)
    assert after == gauge(prefill_ready=1, decode_ready=1, decode_restarting=1)
    assert_engine_dead(answers, "worker 1 crashed at 2500 ms")
    # The planner's decode worker (2) took the later request; the lost ones were detached.
    assert later.status_code == 200 and later.json()["choices"][0]["text"] == "w0 w1 w2"
    assert decode_workers == [-1, -1, 2]
    elastic = report["elastic"]
    assert elastic["scaling"] == [{"t_ms": 1000.0, "pool": "decode", "action": "add", "worker": 2,
                                   "reason": "schedule"}]
    assert [(w["worker"], w["pool"], w["added_ms"], w["ready_ms"], w["crashes"])
            for w in elastic["workers"]] == [(0, "prefill", 0.0, 0.0, 0), (1, "decode", 0.0, 0.0, 1),
                                             (2, "decode", 1000.0, 2000.0, 0)]
    assert elastic["requests"] == {"submitted": 3, "completed": 1, "failed": 2, "rejected": 0, "retried": 0,
                                   "redirected": 0, "cancelled": 0}
    assert elastic["faults"]["crashes"] == 1 and elastic["faults"]["requests_lost"] == 2
    assert (report["completed"], report["failed"], report["num_cancelled"]) == (1, 2, 0)
    assert report["num_handoffs"] == 1  # the split's keys: the completed request's handoff


# (arrival ms, prompt blocks, shared leading blocks, output tokens); arrivals are distinct
ROWS = [(0, 3, 0, 16), (3, 2, 1, 19), (4, 4, 2, 13), (11, 1, 0, 22), (13, 5, 1, 14), (27, 2, 2, 17),
        (28, 3, 0, 11), (40, 6, 3, 15), (41, 2, 0, 18), (55, 3, 1, 12)]


def write_config(tmp: Path) -> Path:
    """Two prefill workers (0, 1) and two decode workers (2, 3); decode worker 2 crashes at
    20 ms, the planner adds a decode worker at 10 ms (it serves from 15 ms on), request 4's
    first KV transfer fails and its decode worker prefills it itself."""
    lines = []
    for i, (t, blocks, shared, out) in enumerate(ROWS):
        hashes = list(range(shared)) + [1000 * (i + 1) + k for k in range(blocks - shared)]
        lines.append(json.dumps({"timestamp": t, "input_length": 16 * blocks - i % 5,
                                 "output_length": out, "hash_ids": hashes}))
    (tmp / "t.jsonl").write_text("\n".join(lines) + "\n")
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 256,
                   "timing_model": {"type": "fixed", "prefill_ms": 5.0, "decode_ms": 1.5}},
        "cluster": {"prefill_workers": 2, "decode_workers": 2, "router": "kv", "handoff_latency_ms": 2.25},
        "workload": {"trace": {"path": str(tmp / "t.jsonl"), "trace_block_size": 16}},
        "lifecycle": {"startup_s": 0.005},
        "planner": {"type": "schedule", "interval_s": 0.01,
                    "steps": [{"at_s": 0.01, "workers": 3, "pool": "decode"}]},
        "faults": {"crashes": [{"at_s": 0.02, "worker": 2}], "restart_s": 0.05,
                   "kv_transfer": {"failures": [{"request": 4, "count": 1}]}},
        "sinks": {"kv_events": [{"type": "jsonl", "path": str(tmp / "kv.jsonl")}]},
    }
    path = tmp / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return path


def serve_trace(path: Path, rows: list[tuple[int, int, int, int]], end_s: float) -> Server:
    """A server of ``path``'s config on a wall clock the test sets: every trace request is
    submitted at its arrival stamp, then the clock runs to ``end_s``."""
    from servesim.replay.runner import load_workload

    loaded, _cfg = load(str(path), [])
    wall = [0.0]
    server = Server(loaded, ServeConfig(speedup=1.0), wall=lambda: wall[0])
    assert isinstance(server.driver, LiveElasticSplitDriver)
    turns = load_workload(loaded.sim.workload, loaded.plugins).turns()

    async def scenario() -> None:
        for (t, *_r), turn in zip(rows, turns, strict=True):
            wall[0] = t / 1000.0
            server.driver.submit(turn.prompt.tokens(), turn.output_length, arrival_ms=float(t))
        wall[0] = end_s
        server.driver._catch_up()
        server.stop()

    asyncio.run(scenario())
    return server


def test_served_arrivals_log_what_run_logs_through_a_crash_a_scale_up_and_a_failed_transfer(
        tmp_path: Path) -> None:
    ran, served = tmp_path / "run", tmp_path / "serve"
    ran.mkdir()
    served.mkdir()
    result = simulate(load_config(str(write_config(ran)), []), record_token_times=True)
    server = serve_trace(write_config(served), ROWS, 0.09)  # past the last request's end
    report = server.report()
    lines = [json.loads(line) for line in server.per_request_lines()]
    assert [line.pop("cancelled") for line in lines] == [False] * len(ROWS)
    assert lines == [json.loads(line) for line in per_request_lines(result.log)]
    elastic, ran_elastic = report["elastic"], result.report["elastic"]
    for key in ("scaling", "faults"):
        assert elastic[key] == ran_elastic[key], key
    assert elastic["requests"] == {**ran_elastic["requests"], "cancelled": 0}
    # What happened: the crash lost requests on worker 2, the added worker 4 served, request
    # 4's decode worker prefilled it, and nothing is left in flight.
    faults = elastic["faults"]
    assert (faults["crashes"], faults["requests_lost"], faults["kv_transfer_failures"],
            faults["local_prefills"]) == (1, 1, 1, 1)
    assert elastic["scaling"] == [{"t_ms": 10.0, "pool": "decode", "action": "add", "worker": 4,
                                   "reason": "schedule"}]
    assert 4 in server.driver.replayer.decode_worker
    assert (report["completed"], report["failed"], report["num_unfinished"]) == (9, 1, 0)
    for key in ("num_handoffs", "mean_ttft_ms", "mean_ttft_transfer_ms", "mean_e2el_ms"):
        assert report[key] == result.report[key], key
    assert (served / "kv.jsonl").read_bytes() == (ran / "kv.jsonl").read_bytes()


def cancel_in(tmp: Path, faults: dict[str, Any], lifecycle: dict[str, Any], at_ms: float,
              end_s: float) -> Server:
    """One prefill worker (0) and one decode worker (1) with ``faults`` and ``lifecycle``; a
    request of 48 prompt tokens arrives at 2 ms (prefill 2..7, transfer 7..9.25, then one
    token per 1.5 ms) and its client leaves at ``at_ms``; the clock then runs to ``end_s``."""
    cfg = {
        "engine": {"backend": "vllm", "block_size": 16, "num_gpu_blocks": 256,
                   "timing_model": {"type": "fixed", "prefill_ms": 5.0, "decode_ms": 1.5}},
        "cluster": {"prefill_workers": 1, "decode_workers": 1, "handoff_latency_ms": 2.25},
        "lifecycle": lifecycle, "faults": faults,
    }
    path = tmp / "sim.yaml"
    path.write_text(json.dumps(cfg))
    loaded, _cfg = load(str(path), [])
    wall = [0.0]
    server = Server(loaded, ServeConfig(speedup=1.0), wall=lambda: wall[0])

    async def scenario() -> None:
        wall[0] = 0.002
        req = server.driver.submit(list(range(4, 52)), 20, arrival_ms=2.0)
        wall[0] = at_ms / 1000.0
        server.driver.cancel(req)
        wall[0] = end_s
        server.driver._catch_up()
        server.stop()

    asyncio.run(scenario())
    return server


def test_a_cancel_while_waiting_for_a_decode_worker_or_a_retry_frees_everything(tmp_path: Path) -> None:
    # The decode worker crashed at 1 ms and restarts at 51 ms: the prefilled request waits
    # for it, its source held on worker 0, until its client leaves at 20 ms.
    waiting = cancel_in(tmp_path, {"crashes": [{"at_s": 0.001, "worker": 1}], "restart_s": 0.05},
                        {"startup_s": 0.0}, 20.0, 0.1)
    # The decode worker crashes at 10 ms under the request (no token yet): it waits 1 s for a
    # retry; its client leaves at 20 ms and the retry never comes.
    retrying = cancel_in(tmp_path, {"crashes": [{"at_s": 0.01, "worker": 1}], "restart_s": 0.05},
                         {"startup_s": 0.0, "retry": {"max_attempts": 1, "backoff_s": 1.0}}, 20.0, 1.5)
    for server, retried in ((waiting, 0), (retrying, 1)):
        driver = server.driver
        (req,) = driver.requests
        assert req.cancelled and not req.rejected and req.times == [] and req.error is None
        report = server.report()
        assert (report["completed"], report["failed"], report["num_cancelled"], report["num_unfinished"]) \
            == (0, 1, 1, 0)
        assert report["elastic"]["requests"] == {"submitted": 1, "completed": 0, "failed": 0, "rejected": 0,
                                                 "retried": retried, "redirected": 0, "cancelled": 1}
        assert driver.blocks_in_use() == 0
        assert all(engine.is_drained() for engine in driver.engines)
        (line,) = [json.loads(x) for x in server.per_request_lines()]
        assert line["cancelled"] and line["completion_ms"] == 20.0
    (line,) = [json.loads(x) for x in waiting.per_request_lines()]
    assert line["source_held_ms"] == 7.0 and line["destination_reserved_ms"] == -1.0


def test_a_cancel_mid_decode_frees_both_sides(tmp_path: Path) -> None:
    # Activated at 9.25 ms, its first token at 10.75 ms; its client leaves at 11.5 ms.
    server = cancel_in(tmp_path, {"crashes": [{"at_s": 5.0, "worker": 1}]}, {"startup_s": 0.0}, 11.5, 0.1)
    (req,) = server.driver.requests
    assert req.cancelled and req.times == [10.75] and req.error is None
    report = server.report()
    assert (report["completed"], report["failed"], report["num_cancelled"],
            report["num_handoffs"]) == (0, 1, 1, 1)
    assert server.driver.blocks_in_use() == 0
    assert all(engine.is_drained() for engine in server.driver.engines)
    (line,) = [json.loads(x) for x in server.per_request_lines()]
    assert line["cancelled"] and line["completion_ms"] == 11.5 and line["destination_activated_ms"] == 9.25


def test_a_request_whose_kv_transfer_fails_ends_with_the_error_naming_its_decode_worker(
        tmp_path: Path) -> None:
    # Its one transfer (7..9.25 ms) fails, with no retry and `fallback: fail`; the client's
    # leaving at 50 ms comes after its end.
    transfer = {"failures": [{"request": 0, "count": 1}], "fallback": "fail"}
    server = cancel_in(tmp_path, {"kv_transfer": transfer}, {"startup_s": 0.0}, 50.0, 0.1)
    (req,) = server.driver.requests
    assert req.rejected and not req.cancelled and req.times == []
    assert req.error == (f"{ENGINE_DEAD}: worker 1 did not receive this request's KV (faults.kv_transfer, "
                         "fallback: fail) at 9.25 ms (simulated) with this request in flight")
    report = server.report()
    assert report["elastic"]["faults"]["kv_transfer_lost"] == 1
    assert (report["completed"], report["failed"], report["num_cancelled"]) == (0, 1, 0)
    assert server.driver.blocks_in_use() == 0
