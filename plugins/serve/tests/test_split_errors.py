"""A prefill/decode split answers as aggregated workers do: an engine-rejected request is
vLLM's 400 on both paths, and once the simulation has stopped a stream ends with ``abort`` and
``[DONE]``, new requests get a 500 and ``/health`` turns 503."""

from __future__ import annotations

import json

import httpx
import pytest
from servesim_serve.testing import running

SPLIT = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=100",
         "cluster.prefill_workers=1", "cluster.decode_workers=1", "cluster.handoff_latency_ms=1"]
REJECTION = ("The engine rejected this request: its 296 input tokens and 4 output tokens can never "
             "fit in the model's KV cache. Please reduce the length of the input prompt or the "
             "number of requested output tokens.")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_split_rejects_a_prompt_larger_than_the_pool_with_vllms_400(stream: bool) -> None:
    with running([*SPLIT, "engine.num_gpu_blocks=4"]) as s, httpx.Client(timeout=30) as c:
        r = c.post(s.base + "/completions",
                   json={"prompt": list(range(4, 300)), "max_tokens": 4, "stream": stream})
        report = s.server.report()
    assert (r.status_code, r.headers["content-type"]) == (400, "application/json")
    assert r.json() == {"error": {"message": REJECTION, "type": "BadRequestError", "param": "input_tokens",
                                  "code": 400}}
    assert (report["num_requests"], report["failed"], report["num_cancelled"]) == (1, 1, 0)


@pytest.mark.parametrize("split", [True, False], ids=["split", "aggregated"])
def test_a_failing_sink_ends_the_stream_and_turns_health_503_in_either_shape(split: bool) -> None:
    sets = SPLIT if split else SPLIT[:2]
    with running([*sets, "sinks.kv_events=[{type: memory}]"]) as s, httpx.Client(timeout=30) as c:
        assert c.get(s.url + "/health").status_code == 200
        driver = s.server.driver
        (sink,) = driver.replayer.kv_sinks if split else driver.kv_sinks
        sink.close()  # a closed memory sink fails every publish
        events = c.post(s.base + "/completions",
                        json={"prompt": list(range(4, 134)), "max_tokens": 50, "stream": True}).text
        later = c.post(s.base + "/completions", json={"prompt": "a", "max_tokens": 2})
        health = c.get(s.url + "/health")
        report = s.server.report()
    last = json.loads(events.split("\n\n")[-3][len("data: "):])
    assert last["choices"][0]["finish_reason"] == "abort" and events.endswith("data: [DONE]\n\n")
    assert later.status_code == 500 and later.json()["error"]["type"] == "InternalServerError"
    assert (health.status_code, health.content) == (503, b"")
    # an aborted request is neither completed nor failed (docs/serve.md), as with aggregated workers
    assert (report["num_requests"], report["num_aborted"], report["completed"], report["failed"]) == (
        1, 1, 0, 0)
