"""``servesim serve`` with ``lifecycle:``, ``planner:`` and ``faults:`` on a prefill/decode
split: a crashed decode worker's stream ends with vLLM's error event, ``/metrics`` counts the
workers of both pools by state, a ``schedule`` planner's decode worker serves live, the report
has the split's keys and ``elastic``; with the arrivals of a trace the server logs what
``servesim run`` logs; a client that leaves while its request waits for a decode worker
cancels it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines
from servesim_serve.app import Server
from servesim_serve.cli import load
from servesim_serve.config import ServeConfig
from servesim_serve.elastic_driver import ENGINE_DEAD, LiveElasticSplitDriver
from servesim_serve.testing import running

WAIT_S = 20.0
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
    answers: dict[str, Any] = {}
    with running(SPLIT) as s, httpx.Client(timeout=30) as c:
        driver = s.server.driver
        assert isinstance(driver, LiveElasticSplitDriver)
        before = workers_gauge(c.get(s.url + "/metrics").text)

        def stream() -> None:
            body = {"prompt": list(range(4, 40)), "max_tokens": 1000, "stream": True}
            answers["stream"] = c.post(s.base + "/completions", json=body).text

        def whole() -> None:
            body = {"prompt": list(range(5, 40)), "max_tokens": 1000}
            answers["whole"] = c.post(s.base + "/completions", json=body)

        threads = [threading.Thread(target=f) for f in (stream, whole)]
        for t in threads:
            t.start()
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
    # The stream: tokens, then vLLM's error event and [DONE]; no finish reason, no usage.
    events = answers["stream"].split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    error = json.loads(events[-3][len("data: "):])
    message = error["error"]["message"]
    assert message.startswith(f"{ENGINE_DEAD}: worker 1 crashed at 2500 ms")
    assert error == {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
    chunks = [json.loads(e[len("data: "):]) for e in events[:-3]]
    assert len(chunks) >= 1 and all(ch["choices"][0]["finish_reason"] is None for ch in chunks)
    whole = answers["whole"]
    assert whole.status_code == 500 and whole.json()["error"]["type"] == "InternalServerError"
    assert whole.json()["error"]["message"].startswith(f"{ENGINE_DEAD}: worker 1 crashed at 2500 ms")
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
