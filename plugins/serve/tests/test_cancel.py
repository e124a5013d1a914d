"""Client disconnects cancel requests (blocks freed, counted as cancelled); the queue limit
answers 503; 1,000 streams with seeded random cancellations leave no block behind."""

from __future__ import annotations

import asyncio
import json

import httpx
from serve_helpers import read_first_token_then_leave, wait_for
from servesim_serve.stream_load import make_plans, stream_one
from servesim_serve.testing import running

# A minute of simulated time per decode pass at speedup 1: after its first token a stream
# waits far longer than any test, so a client that leaves then is certain to cancel it.
SLOW = ["engine.timing_model={type: fixed, prefill_ms: 0.001, decode_ms: 60000.0}", "serve.speedup=1"]


def active_blocks(server) -> int:
    return sum(r.metrics().active_blocks for e in server.driver.engines for r in e.ranks)


def test_a_stream_left_after_its_first_token_is_cancelled() -> None:
    with running(SLOW) as s:
        first = read_first_token_then_leave(s.base + "/completions",
                                            {"prompt": list(range(4, 204)), "max_tokens": 50, "stream": True})
        assert json.loads(first[6:])["choices"][0]["text"] == "w0"
        (req,) = s.server.driver.requests
        wait_for(lambda: req.cancelled, "the cancellation")
        assert active_blocks(s.server) == 0
        assert all(r.is_drained() for e in s.server.driver.engines for r in e.ranks)
        report = httpx.get(s.url + "/servesim/report").json()
        metrics = httpx.get(s.url + "/metrics").text
    assert (report["num_requests"], report["completed"], report["num_cancelled"]) == (1, 0, 1)
    assert len(req.times) == 1 and req.done_ms == -1.0
    abort = 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="servesim"} 1.0'
    assert abort in metrics


def test_whole_body_request_cancelled_when_the_client_leaves() -> None:
    with running(SLOW) as s:
        try:
            httpx.post(s.base + "/completions", json={"prompt": "a b", "max_tokens": 5}, timeout=0.5)
        except httpx.ReadTimeout:
            pass
        (req,) = s.server.driver.requests
        wait_for(lambda: req.cancelled, "the cancellation")
        assert active_blocks(s.server) == 0


def test_queue_limit_answers_503_with_vllms_error_body() -> None:
    sets = ["engine.timing_model={type: fixed, prefill_ms: 60000.0, decode_ms: 1.0}", "serve.speedup=1",
            "serve.max_queued_requests=1"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        with c.stream("POST", s.base + "/completions", json={"prompt": "a", "max_tokens": 3, "stream": True}):
            wait_for(lambda: s.server.driver.queued == 1, "the first request")
            r = c.post(s.base + "/completions", json={"prompt": "b", "max_tokens": 3})
        assert r.status_code == 503
        err = r.json()["error"]
        assert (err["type"], err["code"], err["param"]) == ("ServiceUnavailableError", 503, None)
        wait_for(lambda: s.server.driver.queued == 0, "the cancellation")
        report = s.server.report()
    assert (report["num_requests"], report["num_queue_full"], report["num_cancelled"]) == (1, 1, 1)


# 4 wall ms per pass: slow enough that a crowded machine keeps up (a server that falls behind
# plays the passes it missed all at once), fast enough for 1,000 streams in a few seconds.
LOAD = ["engine.timing_model={type: fixed, prefill_ms: 20.0, decode_ms: 20.0}", "serve.speedup=5",
        "cluster.workers=2", "cluster.router=kv", "engine.num_gpu_blocks=4096"]
N_STREAMS, IN_FLIGHT, SEED = 1000, 100, 17


async def _drive(url: str, plans: list) -> list[int]:
    host, port = url.split("//")[1].split(":")
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def bounded(plan):
        async with gate:
            return await stream_one(host, int(port), plan)

    return await asyncio.gather(*(bounded(p) for p in plans))


def test_a_thousand_streams_with_cancellations_leak_nothing() -> None:
    # 30 % leave early; their requests are far too long to finish first
    plans = make_plans(N_STREAMS, 0.3, SEED)
    with running(LOAD) as s:
        got = asyncio.run(_drive(s.url, plans))
        driver = s.server.driver
        wait_for(lambda: driver.in_flight == 0, "every request to end")
        report = s.server.report()
        wait_for(lambda: not any(e.pass_in_flight for e in driver.engines), "the last passes")
        assert active_blocks(s.server) == 0
        assert all(e.is_drained() for e in driver.engines)
        assert not any(driver.state.active_hashes)  # the router's view holds no request
    leavers = [i for i, p in enumerate(plans) if p[2] is not None]
    stayers = [i for i, p in enumerate(plans) if p[2] is None]
    assert [got[i] for i in stayers] == [plans[i][1] for i in stayers]
    assert (report["num_requests"], report["num_cancelled"], report["completed"]) == (
        N_STREAMS, len(leavers), len(stayers))
    assert report["failed"] == len(leavers)  # cancelled requests count as failed (docs/report.md)
    assert report["num_unfinished"] == 0 and report["num_queue_full"] == 0
    assert report["total_output_tokens"] == sum(plans[i][1] for i in stayers)
    assert driver.queued == 0
    assert sorted(r.prompt_len for r in driver.requests) == sorted(len(p[0]) for p in plans)
    # every cancelled request got at least the tokens its client read, and never all of them
    cancelled = [r for r in driver.requests if r.cancelled]
    assert len(cancelled) == len(leavers) and all(0 < len(r.times) < r.max_tokens for r in cancelled)


def test_a_failing_sink_stops_the_simulation_with_errors_not_a_hang() -> None:
    sets = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=100",
            "sinks.kv_events=[{type: memory}]"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        (sink,) = s.server.driver.kv_sinks
        sink.close()  # a closed memory sink fails every publish
        body = {"prompt": list(range(4, 4 + 130)), "max_tokens": 50, "stream": True}
        events = c.post(s.base + "/completions", json=body).text
        assert s.server.driver.failure is not None
        later = c.post(s.base + "/completions", json={"prompt": "a", "max_tokens": 2})
        report = s.server.report()
    last = json.loads(events.split("\n\n")[-3][len("data: "):])
    assert last["choices"][0]["finish_reason"] == "abort" and events.endswith("data: [DONE]\n\n")
    assert later.status_code == 500 and later.json()["error"]["type"] == "InternalServerError"
    assert "MemoryKvEventSink" in later.json()["error"]["message"]
    assert (report["num_requests"], report["num_aborted"], report["completed"]) == (1, 1, 0)
