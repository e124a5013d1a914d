"""Simulated latencies of requests on an idle server are the engine's pass times, exactly;
reasoning splits the output; sinks publish at the simulated end of each pass."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from servesim_serve.testing import running

FIXED = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=500"]


def test_one_request_sees_the_pass_times() -> None:
    with running(FIXED) as s:
        r = httpx.post(s.base + "/completions", json={"prompt": "a b c", "max_tokens": 5}, timeout=30)
        assert r.status_code == 200
        report = httpx.get(s.url + "/servesim/report", timeout=30).json()
        lines = [json.loads(x) for x in s.server.per_request_lines()]
    assert (report["num_requests"], report["completed"], report["total_output_tokens"]) == (1, 1, 5)
    assert report["mean_ttft_ms"] == pytest.approx(10.0, abs=1e-6)
    assert report["mean_tpot_ms"] == pytest.approx(2.0, abs=1e-6)
    assert report["mean_e2el_ms"] == pytest.approx(18.0, abs=1e-6)
    assert report["num_cancelled"] == 0 and report["num_queue_full"] == 0
    assert report["config"]["serve"]["speedup"] == 500.0
    (line,) = lines
    arrival = line["arrival_ms"]
    gaps = [t - arrival for t in line["token_times_ms"]]
    assert gaps == pytest.approx([10.0, 12.0, 14.0, 16.0, 18.0], abs=1e-6)
    assert line["cancelled"] is False and line["num_output_tokens"] == 5


def test_prefix_cache_hit_reaches_usage() -> None:
    prompt = list(range(4, 4 + 200))  # three full 64-token blocks
    with running(FIXED) as s:
        first = httpx.post(s.base + "/completions", json={"prompt": prompt, "max_tokens": 2}).json()
        second = httpx.post(s.base + "/completions", json={"prompt": prompt, "max_tokens": 2}).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 192


REASONING = [*FIXED, "serve.reasoning={thinking_ratio: 0.5, start_thinking_token_id: 1,"
                     " end_thinking_token_id: 2}"]


def test_reasoning_streams_the_thinking_span_apart() -> None:
    body = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 6, "stream": True}
    with running(REASONING) as s:
        events = httpx.post(s.base + "/chat/completions", json=body, timeout=30).text.split("\n\n")
        whole = httpx.post(s.base + "/chat/completions", json={**body, "stream": False}).json()
        done = httpx.post(s.base + "/completions", json={"prompt": "q", "max_tokens": 6}).json()
        report = httpx.get(s.url + "/servesim/report").json()
    chunks = [json.loads(e[len("data: "):]) for e in events if e and e != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    # [start, w1, end, w3, w4, w5]: the boundaries send nothing (floor(6 * 0.5) = 3 thinking tokens)
    assert deltas == [{"role": "assistant", "content": ""},
                      {"reasoning": "w1", "reasoning_content": "w1"},
                      {"content": "w3"}, {"content": " w4"}, {"content": " w5"}]
    message = whole["choices"][0]["message"]
    assert (message["reasoning"], message["reasoning_content"]) == ("w1", "w1")
    assert message["content"] == "w3 w4 w5"
    assert whole["usage"]["completion_tokens"] == 6
    # vLLM parses reasoning for chat only: the completion has the same thinking span as plain
    # text, its special boundary tokens (<s> = 1, </s> = 2) left out
    assert done["choices"][0]["text"] == "w1 w3 w4 w5"
    assert done["usage"]["completion_tokens"] == 6
    # time to first answer token: prefill 10 ms + three decode passes, for all three requests
    assert report["completed"] == 3
    assert (report["max_ttfat_ms"], report["median_ttfat_ms"]) == pytest.approx((16.0, 16.0))
    assert report["mean_ttfat_ms"] == pytest.approx(16.0, abs=1e-6)


def test_completions_stream_the_thinking_span_as_text() -> None:
    body = {"prompt": "q", "max_tokens": 6, "stream": True}
    special = REASONING
    plain = [*FIXED, "serve.reasoning={thinking_ratio: 0.5, start_thinking_token_id: 10,"
                     " end_thinking_token_id: 11}"]  # w6 and w7: ordinary words
    texts = {}
    for name, sets in (("special", special), ("plain", plain)):
        with running(sets) as s:
            events = httpx.post(s.base + "/completions", json=body, timeout=30).text.split("\n\n")
        chunks = [json.loads(e[len("data: "):]) for e in events if e and e != "data: [DONE]"]
        assert all("reasoning" not in c["choices"][0] for c in chunks)
        texts[name] = [c["choices"][0]["text"] for c in chunks]
    # one chunk per pass, the boundary passes' chunks empty when the boundary is special
    assert texts["special"] == ["", "w1", "", " w3", " w4", " w5"]
    assert texts["plain"] == ["w6", " w1", " w7", " w3", " w4", " w5"]


def test_sinks_publish_at_the_end_of_each_pass(tmp_path) -> None:
    kv, fpm = tmp_path / "kv.jsonl", tmp_path / "fpm.jsonl"
    sets = [*FIXED, f"sinks.kv_events=[{{type: jsonl, path: {json.dumps(str(kv))}}}]",
            f"sinks.fpm=[{{type: jsonl, path: {json.dumps(str(fpm))}}}]"]
    with running(sets) as s:
        httpx.post(s.base + "/completions", json={"prompt": list(range(4, 4 + 130)), "max_tokens": 3})
        (req,) = s.server.driver.requests
    events = [json.loads(x) for x in kv.read_text().splitlines()]
    passes = [json.loads(x) for x in fpm.read_text().splitlines()]
    stored = [e for e in events if e["type"] == "BlockStored"]
    # two full 64-token blocks of the prompt are stored when the prefill pass ends
    assert sum(len(e["block_hashes"]) for e in stored) == 2
    assert {e["at_ms"] for e in stored} == {req.times[0]}
    assert len(passes) == 3  # one prefill and two decode passes
    assert [p["at_ms"] for p in passes] == req.times


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_backend_serves_behind_a_router_with_data_parallel_ranks(backend: str) -> None:
    sets = [*FIXED, f"engine.backend={backend}", "engine.dp_size=2", "cluster.workers=2",
            "cluster.router=kv"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        outs = [c.post(s.base + "/completions", json={"prompt": list(range(4 + i, 70 + i)), "max_tokens": 3})
                for i in range(6)]
        report = s.server.report()
        slots = {(r.worker, r.dp_rank) for r in s.server.driver.requests}
        metrics = c.get(s.url + "/metrics").text
    assert [o.json()["usage"]["completion_tokens"] for o in outs] == [3] * 6
    assert (report["completed"], report["total_output_tokens"]) == (6, 18)
    assert len(slots) > 1 and all(0 <= w < 2 and 0 <= d < 2 for w, d in slots)
    for w, d in slots:  # vLLM labels an engine "engine", SGLang "dp_rank": worker * dp_size + rank
        assert re.search(rf'(engine|dp_rank)="{w * 2 + d}"', metrics)
