"""The endpoints, driven with the openai SDK and raw HTTP against a server on 127.0.0.1."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from servesim_serve.testing import running

# Fixed pass times (prefill 10 ms, decode 2 ms); a large speedup keeps the test short.
FIXED = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}"]
SETS = [*FIXED, "serve.speedup=1000", "engine.max_model_len=256"]


def sse_events(text: str) -> list[dict | str]:
    """``data:`` payloads of an SSE body, parsed (``[DONE]`` stays a string)."""
    out: list[dict | str] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: ")
        payload = block[len("data: "):]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.fixture(scope="module")
def server():
    with running(SETS) as s:
        yield s


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server.base, api_key="none", max_retries=0, timeout=30) as c:
        yield c


def test_completion_whole_body(client) -> None:
    r = client.completions.create(model="servesim", prompt="a b c d", max_tokens=5)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].text == "w0 w1 w2 w3 w4"
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (4, 5, 9)
    assert r.usage.prompt_tokens_details.cached_tokens == 0


def test_token_id_prompt_and_unknown_fields(client) -> None:
    r = client.completions.create(model="servesim", prompt=[7, 8, 9], max_tokens=2,
                                  extra_body={"ignore_eos": True, "no_such_field": {"x": 1}, "top_k": 5})
    assert r.usage.prompt_tokens == 3 and r.choices[0].text == "w0 w1"


def test_completion_stream_with_usage(client) -> None:
    stream = client.completions.create(model="servesim", prompt="x y", max_tokens=4, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == ["w0", " w1", " w2", " w3"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, None, "length"]
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and (last.usage.prompt_tokens, last.usage.completion_tokens) == (2, 4)


def test_continuous_usage_counts_tokens_so_far(server) -> None:
    body = {"prompt": "x y z", "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    r = httpx.post(server.base + "/completions", json=body, timeout=30)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    usages = [(e["usage"]["completion_tokens"], e["usage"]["total_tokens"]) for e in events[:-1]]
    assert usages == [(1, 4), (2, 5), (3, 6), (3, 6)]
    assert events[-2]["choices"] == []


def test_chat_stream_role_first_then_content(client) -> None:
    stream = client.chat.completions.create(
        model="servesim", messages=[{"role": "user", "content": "hello"}], max_completion_tokens=3,
        max_tokens=50, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    assert [c.choices[0].delta.content for c in chunks[1:-1]] == ["w0", " w1", " w2"]
    assert chunks[-2].choices[0].finish_reason == "length"
    # "user: hello\n" + "assistant:" is three words
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 3)


def test_chat_content_parts(client) -> None:
    parts = [{"type": "text", "text": "one two"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "three"}]
    r = client.chat.completions.create(model="servesim", max_tokens=2,
                                       messages=[{"role": "system", "content": "be brief"},
                                                 {"role": "user", "content": parts}])
    assert r.choices[0].message.content == "w0 w1"
    # "system: be brief\n" (3) + "user: one two three\n" (4) + "assistant:" (1)
    assert r.usage.prompt_tokens == 8


def test_models_health_tokenize(server, client) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["servesim"]
    raw = httpx.get(server.base + "/models").json()
    assert raw["data"][0]["root"] == "servesim" and raw["data"][0]["max_model_len"] == 256
    assert httpx.get(server.url + "/health").status_code == 200
    tok = httpx.post(server.url + "/tokenize", json={"prompt": "w5 w7 hello"}).json()
    assert tok["count"] == 3 and tok["tokens"][:2] == [9, 11] and tok["max_model_len"] == 256
    detok = httpx.post(server.url + "/detokenize", json={"tokens": [9, 11, 0]}).json()
    assert detok == {"prompt": "w5 w7 <unk>"}


def test_metrics_have_vllm_names(server, client) -> None:
    client.completions.create(model="servesim", prompt="a", max_tokens=2)
    text = httpx.get(server.url + "/metrics").text
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:num_requests_waiting", "gauge"),
                       ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:generation_tokens_total", "counter"),
                       ("vllm:prompt_tokens_total", "counter"), ("vllm:request_success_total", "counter"),
                       ("vllm:time_to_first_token_seconds", "histogram"),
                       ("vllm:inter_token_latency_seconds", "histogram")):
        assert f"# TYPE {name} {kind}" in text
    assert 'vllm:request_success_total{engine="0",finished_reason="length",model_name="servesim"}' in text
    # vLLM 0.32 keeps prometheus-client's `_created` samples (plugins/prometheus/tests/data).
    assert "vllm:request_success_created{" in text


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == response.status_code
    return body["error"]


def test_bad_json_is_400_in_openai_shape(server) -> None:
    r = httpx.post(server.base + "/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and error_of(r)["type"] == "BadRequestError"
    r = httpx.post(server.base + "/chat/completions", json=[1, 2])
    assert r.status_code == 400


def test_unknown_model_is_404(client) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="gpt-9", prompt="a", max_tokens=1)
    err = info.value.body
    assert err["type"] == "NotFoundError" and err["param"] == "model"
    assert err["message"] == "The model `gpt-9` does not exist. Valid aliases: servesim."


def test_too_long_prompt_is_400(server, client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="servesim", prompt=list(range(4, 260)), max_tokens=1)
    assert "maximum context length is 256 tokens" in info.value.body["message"]
    r = httpx.post(server.base + "/completions", json={"prompt": list(range(4, 204)), "max_tokens": 100})
    assert r.status_code == 400 and error_of(r)["param"] == "max_tokens"


def test_other_bad_requests(server) -> None:
    for body in ({"prompt": "a", "n": 2}, {"prompt": "a", "max_tokens": 0}, {"prompt": {"x": 1}},
                 {"prompt": "a", "stream_options": {"include_usage": True}}, {"prompt": ["a", "b"]},
                 {"prompt": [5, True]}, {"prompt": [5, -1]}, {"prompt": [5, 6.0]}, {"prompt": [[5, "x"]]}):
        r = httpx.post(server.base + "/completions", json=body)
        assert r.status_code == 400, body
        error_of(r)
    r = httpx.post(server.base + "/chat/completions", json={"messages": []})
    assert r.status_code == 400


def test_token_id_prompts_are_ints_not_bools_and_not_negative() -> None:
    from servesim_serve.protocol import token_ids

    ids = [0, 5, 2**70]
    assert token_ids([]) == [] and token_ids([[1]][0]) == [1]
    assert token_ids(ids) == ids and token_ids(ids) is not ids  # a copy: the engine keeps it
    assert all(token_ids(p) is None for p in ([True], [1, False], [-1], [1, 2.0], [1, "2"], [None]))


def test_default_max_tokens_is_capped_by_max_model_len(server) -> None:
    r = httpx.post(server.base + "/completions", json={"prompt": list(range(4, 250))}).json()
    assert r["usage"]["completion_tokens"] == 10  # min(128, 256 - 246)
