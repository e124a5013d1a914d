"""``servesim serve`` with ``lifecycle:``, ``planner:`` and ``faults:``: a crashed worker's
stream ends with vLLM's error event and a whole-body request gets its 500 body, ``/metrics``
counts workers by state, a ``schedule`` planner's worker serves live, a client that leaves
cancels its request (a prefill/decode split's: tests/test_elastic_split.py)."""

from __future__ import annotations

import json
import threading

import httpx
from serve_helpers import (
    WAIT_S,
    assert_engine_dead,
    read_first_token_then_leave,
    start_stream_and_whole,
    wait_for,
)
from servesim_serve.elastic_driver import ENGINE_DEAD
from servesim_serve.testing import running

# One worker to begin with; the planner adds a second at 1 s, which starts for 2 s (it serves
# from 3 s on); worker 0 crashes at 3 s and restarts a minute later. Decode passes of 50 ms:
# a request of 1,000 tokens is still running at the crash.
ELASTIC = ["engine.timing_model={type: fixed, prefill_ms: 5.0, decode_ms: 50.0}", "serve.speedup=1",
           "cluster.workers=1",
           "planner={type: schedule, interval_s: 100, steps: [{at_s: 1.0, workers: 2}]}",
           "lifecycle={startup_s: 2.0}",
           "faults={crashes: [{at_s: 3.0, worker: 0}], restart_s: 60.0}"]
CRASH_MS = 3000.0


def workers_gauge(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith('servesim:workers{model_name="servesim",pool="default",state="'):
            state = line.split('state="', 1)[1].split('"', 1)[0]
            out[state] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_crash_ends_streams_with_vllms_error_and_the_planner_adds_a_worker_live() -> None:
    with running(ELASTIC) as s, httpx.Client(timeout=30) as c:
        driver = s.server.driver
        before = workers_gauge(c.get(s.url + "/metrics").text)
        answers, threads = start_stream_and_whole(c, s.base)
        wait_for(lambda: len(driver.requests) == 2, "both requests")
        # Both arrived before the second worker serves: both are on worker 0.
        assert all(r.arrival < CRASH_MS for r in driver.requests)
        for t in threads:
            t.join(WAIT_S)
        rp = driver.replayer
        assert rp.records[0].state.value == "restarting"
        after = workers_gauge(c.get(s.url + "/metrics").text)
        # The worker the planner added serves a request now.
        later = c.post(s.base + "/completions", json={"prompt": "a b c", "max_tokens": 3})
        homes = list(rp.log.worker)
        report = s.server.report()
    assert before == {"starting": 0.0, "warmup": 0.0, "ready": 1.0, "draining": 0.0, "restarting": 0.0,
                      "stopped": 0.0}
    assert after == {"starting": 0.0, "warmup": 0.0, "ready": 1.0, "draining": 0.0, "restarting": 1.0,
                     "stopped": 0.0}
    assert_engine_dead(answers, "worker 0 crashed at 3000 ms")
    assert later.status_code == 200 and later.json()["choices"][0]["text"] == "w0 w1 w2"
    assert homes == [0, 0, 1]  # the crashed worker's two requests, then the added worker's
    elastic = report["elastic"]
    assert elastic["scaling"] == [{"t_ms": 1000.0, "pool": "default", "action": "add", "worker": 1,
                                   "reason": "schedule"}]
    assert [(w["worker"], w["added_ms"], w["ready_ms"], w["crashes"]) for w in elastic["workers"]] == [
        (0, 0.0, 0.0, 1), (1, 1000.0, 3000.0, 0)]
    assert elastic["requests"] == {"submitted": 3, "completed": 1, "failed": 2, "rejected": 0, "retried": 0,
                                   "redirected": 0, "cancelled": 0}
    assert elastic["faults"]["crashes"] == 1 and elastic["faults"]["requests_lost"] == 2
    assert (report["completed"], report["failed"], report["num_cancelled"]) == (1, 2, 0)


def test_a_client_that_leaves_cancels_its_request_on_an_elastic_cluster() -> None:
    sets = ["engine.timing_model={type: fixed, prefill_ms: 0.001, decode_ms: 60000.0}", "serve.speedup=1",
            "lifecycle={startup_s: 0.0}"]
    with running(sets) as s:
        read_first_token_then_leave(s.base + "/completions",
                                    {"prompt": "a b c", "max_tokens": 5, "stream": True})
        (req,) = s.server.driver.requests
        wait_for(lambda: req.cancelled, "the cancellation")
        blocks = sum(r.metrics().active_blocks for e in s.server.driver.engines for r in e.ranks)
        report = s.server.report()
        (line,) = s.server.per_request_lines()
    assert blocks == 0
    assert (report["completed"], report["failed"], report["num_cancelled"]) == (0, 1, 1)
    assert report["elastic"]["requests"]["cancelled"] == 1 and report["elastic"]["requests"]["rejected"] == 0
    assert json.loads(line)["cancelled"] is True


def test_a_lost_request_without_tokens_is_retried_and_one_with_tokens_fails() -> None:
    """One sequence at a time: at the crash the first request streams, the second waits with
    no token. With ``lifecycle.retry`` the second starts over on the added worker and completes;
    the first, whose client holds tokens, fails as without a retry."""
    sets = [*ELASTIC, "engine.max_num_seqs=1",
            "lifecycle={startup_s: 2.0, retry: {max_attempts: 1, backoff_s: 0.0}}"]
    answers: dict[str, httpx.Response] = {}
    with running(sets) as s, httpx.Client(timeout=30) as c:
        driver = s.server.driver

        def post(name: str, prompt: list[int], max_tokens: int) -> None:
            answers[name] = c.post(s.base + "/completions", json={"prompt": prompt, "max_tokens": max_tokens})

        first = threading.Thread(target=post, args=("first", list(range(4, 40)), 1000))
        first.start()
        wait_for(lambda: len(driver.requests) == 1, "the first request")
        second = threading.Thread(target=post, args=("second", list(range(5, 40)), 3))
        second.start()
        for t in (first, second):
            t.join(WAIT_S)
        assert all(r.arrival < CRASH_MS for r in driver.requests)
        homes = list(driver.replayer.log.worker)
        report = s.server.report()
    assert answers["first"].status_code == 500
    lost, retried = answers["first"], answers["second"]
    assert lost.json()["error"]["message"].startswith(f"{ENGINE_DEAD}: worker 0 crashed at 3000 ms")
    assert retried.status_code == 200 and retried.json()["choices"][0]["text"] == "w0 w1 w2"
    assert homes == [0, 1]
    assert report["elastic"]["requests"] == {"submitted": 2, "completed": 1, "failed": 1, "rejected": 0,
                                             "retried": 1, "redirected": 0, "cancelled": 0}


def test_injected_rejections_tell_the_client_the_reason() -> None:
    """``faults.rejections``: an overloaded rejection is a 503, a context-length one vLLM's 400,
    each naming the injected reason, for a streamed and a whole-body request alike."""
    every = ["engine.timing_model={type: fixed, prefill_ms: 5.0, decode_ms: 5.0}",
             "cluster.workers=1", "faults={rejections: {rate: 1.0, reasons: {%s: 1}}}"]
    for reason, status, err_type in (("overloaded", 503, "ServiceUnavailableError"),
                                     ("context_length", 400, "BadRequestError")):
        with running([every[0], every[1], every[2] % reason]) as s, httpx.Client(timeout=30) as c:
            whole = c.post(s.base + "/completions", json={"prompt": [4, 5, 6], "max_tokens": 3})
            body = whole.json()
            assert whole.status_code == status and body["error"]["type"] == err_type
            assert body["error"]["message"] == (
                f"The request was rejected on arrival (injected fault: {reason}).")
            # refused before its stream starts: the same answer, as vLLM refuses a request
            streamed = c.post(s.base + "/completions",
                              json={"prompt": [4, 5, 6], "max_tokens": 3, "stream": True})
            assert streamed.status_code == status and streamed.json() == body
            report = c.get(s.url + "/servesim/report").json()
            assert report["elastic"]["faults"]["rejected"] == {reason: 2}
            assert report["elastic"]["requests"]["rejected"] == 2
