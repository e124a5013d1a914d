"""A prefill/decode split served live: the same handoff, routers, report and sink output as
``servesim run``'s disaggregated replay of the same arrivals, tokens from the decode workers,
and a cancellation that frees the request's blocks wherever it is."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from servesim.config.loader import load_config
from servesim.replay.runner import load_workload, simulate
from servesim.report.summary import dumps, per_request_lines
from servesim_serve.app import Server
from servesim_serve.cli import load
from servesim_serve.config import ServeConfig
from servesim_serve.disagg_driver import LiveDisaggDriver
from servesim_serve.testing import running

SERVE_KEYS = {"num_queue_full", "num_unfinished", "num_aborted"}
# (arrival ms, prompt blocks, shared leading blocks, output tokens); arrivals are distinct
ROWS = [(0, 3, 0, 6), (3, 2, 1, 9), (4, 4, 2, 3), (11, 1, 0, 12), (13, 5, 1, 4), (27, 2, 2, 7),
        (28, 3, 0, 1), (40, 6, 3, 5), (41, 2, 0, 8), (55, 3, 1, 2)]


def write_config(tmp: Path, backend: str = "vllm", rows: list[tuple[int, int, int, int]] = ROWS) -> Path:
    lines = []
    for i, (t, blocks, shared, out) in enumerate(rows):
        hashes = list(range(shared)) + [1000 * (i + 1) + k for k in range(blocks - shared)]
        lines.append(json.dumps({"timestamp": t, "input_length": 16 * blocks - i % 5,
                                 "output_length": out, "hash_ids": hashes}))
    (tmp / "t.jsonl").write_text("\n".join(lines) + "\n")
    cfg = {
        "engine": {"backend": backend, "block_size": 16, "num_gpu_blocks": 256,
                   "timing_model": {"type": "fixed", "prefill_ms": 5.0, "decode_ms": 1.5}},
        "cluster": {"prefill_workers": 2, "decode_workers": 2, "router": "kv",
                    "handoff_latency_ms": 2.25, "decode_engine": {"num_gpu_blocks": 40}},
        "workload": {"trace": {"path": str(tmp / "t.jsonl"), "trace_block_size": 16}},
        "sinks": {"kv_events": [{"type": "jsonl", "path": str(tmp / "kv.jsonl")}],
                  "fpm": [{"type": "jsonl", "path": str(tmp / "fpm.jsonl")}]},
    }
    path = tmp / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return path


def serve_trace(path: Path) -> tuple[Server, list[Any]]:
    """A server of ``path``'s config on a wall clock the test sets: every trace request is
    submitted at its arrival stamp, then the clock runs past the last pass."""
    loaded, cfg = load(str(path), [])
    wall = [0.0]
    server = Server(loaded, ServeConfig(speedup=1.0), wall=lambda: wall[0])
    assert isinstance(server.driver, LiveDisaggDriver)
    turns = load_workload(loaded.sim.workload, loaded.plugins).turns()

    async def scenario() -> list[Any]:
        reqs = []
        for t, turn in zip([r[0] for r in ROWS], turns, strict=True):
            wall[0] = t / 1000.0
            reqs.append(server.driver.submit(turn.prompt.tokens(), turn.output_length,
                                             arrival_ms=float(t)))
        wall[0] = 10.0
        server.driver._catch_up()
        server.stop()
        return reqs

    return server, asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_served_arrivals_give_run_s_report_lines_and_sink_files(tmp_path: Path, backend: str) -> None:
    ran, served = tmp_path / "run", tmp_path / "serve"
    ran.mkdir()
    served.mkdir()
    result = simulate(load_config(str(write_config(ran, backend)), []), record_token_times=True)
    server, reqs = serve_trace(write_config(served, backend))
    report = server.report()
    assert {k: report.pop(k) for k in SERVE_KEYS} == {"num_queue_full": 0, "num_unfinished": 0,
                                                       "num_aborted": 0}
    report["config"] = result.report["config"]  # (the sink paths differ)
    assert dumps(report) == dumps(result.report)
    lines = [json.loads(line) for line in server.per_request_lines()]
    assert [line.pop("cancelled") for line in lines] == [False] * len(ROWS)
    assert lines == [json.loads(line) for line in per_request_lines(result.log)]
    for name in ("kv.jsonl", "fpm.jsonl"):
        assert (served / name).read_bytes() == (ran / name).read_bytes(), name
    assert (served / "kv.jsonl").stat().st_size > 0 and (served / "fpm.jsonl").stat().st_size > 0
    # The streams saw the decode workers' tokens at the logged times, one step per pass.
    for req, times in zip(reqs, result.log.token_times, strict=True):
        assert req.times == times and len(req.times) == req.steps[-1] and req.done_ms >= 0
        assert req.worker >= 2  # a decode worker (0 and 1 are the prefill pool)
    assert report["num_handoffs"] == len(ROWS)
    assert all(engine.is_drained() for engine in server.driver.engines)
    if backend == "vllm":  # (SGLang's active blocks count its radix-resident pages too)
        assert server.driver.blocks_in_use() == 0


def cancel_at(tmp_path: Path, at_ms: float) -> tuple[Server, Any]:
    # Alone on the cluster: prefill 0..5, transfer 5..7.25, then one token per 1.5 ms.
    path = write_config(tmp_path, rows=[(0, 3, 0, 20)])
    loaded, _cfg = load(str(path), [])
    wall = [0.0]
    server = Server(loaded, ServeConfig(speedup=1.0), wall=lambda: wall[0])

    async def scenario() -> Any:
        req = server.driver.submit(list(range(4, 52)), 20, arrival_ms=0.0)
        wall[0] = at_ms / 1000.0
        server.driver.cancel(req)
        wall[0] = 1.0
        server.driver._catch_up()
        server.stop()
        return req

    return server, asyncio.run(scenario())


@pytest.mark.parametrize(("at_ms", "tokens"), [(3.0, 0), (6.0, 0), (10.0, 1)])
def test_a_cancel_in_prefill_transfer_or_decode_frees_its_blocks(tmp_path: Path, at_ms: float,
                                                                 tokens: int) -> None:
    server, req = cancel_at(tmp_path, at_ms)
    assert req.cancelled and not req.rejected and len(req.times) == tokens
    report = server.report()
    assert report["num_cancelled"] == 1 and report["completed"] == 0 and report["failed"] == 1
    assert report["num_unfinished"] == 0
    assert server.driver.blocks_in_use() == 0
    assert all(engine.is_drained() for engine in server.driver.engines)
    (line,) = [json.loads(x) for x in server.per_request_lines()]
    assert line["cancelled"] and line["completion_ms"] == at_ms
    assert (line["destination_activated_ms"] is not None and line["destination_activated_ms"] >= 0) \
        is (at_ms > 7.25)


SPLIT = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=200",
         "cluster.prefill_workers=1", "cluster.decode_workers=2", "cluster.handoff_latency_ms=4"]


def test_a_split_streams_the_decode_workers_tokens_over_http() -> None:
    with running(SPLIT) as s:
        chunks = []
        with httpx.stream("POST", s.base + "/completions", timeout=30,
                          json={"prompt": "a b c d", "max_tokens": 4, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))
        whole = httpx.post(s.base + "/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "x y"}], "max_tokens": 3}).json()
        report = httpx.get(s.url + "/servesim/report", timeout=30).json()
        first, second = s.server.driver.requests
        metrics = httpx.get(s.url + "/metrics", timeout=30).text
    assert len(chunks) == 4 and chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 3
    # prefill 10 ms, transfer 4 ms, then a decode pass of 2 ms per token
    assert [t - first.arrival for t in first.times] == pytest.approx([16.0, 18.0, 20.0, 22.0])
    assert first.worker in (1, 2) and second.worker in (1, 2)
    assert report["completed"] == 2 and report["num_handoffs"] == 2
    assert report["mean_kv_transfer_ms"] == pytest.approx(4.0)
    assert report["worker_utilization"]["prefill"] > 0
    assert 'engine="2"' in metrics  # one metric child per worker of both pools


def test_a_split_with_an_empty_pool_is_refused_naming_the_key() -> None:
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="needs both prefill_workers and decode_workers") as info:
        load(None, ["cluster.prefill_workers=1"])
    assert info.value.path == "cluster.decode_workers"


@pytest.mark.parametrize(("where", "prefill_ms", "decode_ms"),
                         [("prefill", 60000.0, 1.0), ("decode", 0.001, 60000.0)])
def test_a_client_that_leaves_cancels_its_request_on_either_pool(where: str, prefill_ms: float,
                                                                  decode_ms: float) -> None:
    import time

    sets = ["cluster.prefill_workers=1", "cluster.decode_workers=1", "serve.speedup=1",
            f"engine.timing_model={{type: fixed, prefill_ms: {prefill_ms}, decode_ms: {decode_ms}}}"]
    with running(sets) as s:
        try:  # a minute-long pass: the client gives up long before it ends
            httpx.post(s.base + "/completions", json={"prompt": list(range(4, 104)), "max_tokens": 5},
                       timeout=0.5)
        except httpx.ReadTimeout:
            pass
        (req,) = s.server.driver.requests
        deadline = time.monotonic() + 20.0
        while not req.cancelled:
            assert time.monotonic() < deadline, "timed out waiting for the cancellation"
            time.sleep(0.005)
        blocks = s.server.driver.blocks_in_use()
        report = s.server.report()
        (line,) = [json.loads(x) for x in s.server.per_request_lines()]
    assert blocks == 0 and req.times == []  # (the minute-long pass is still running)
    assert (report["num_requests"], report["completed"], report["num_cancelled"]) == (1, 0, 1)
    assert (line["prefill_admit_ms"] >= 0, line["decode_admit_ms"] >= 0) == (True, where == "decode")
