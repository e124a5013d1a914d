"""A server that tells the truth: engine rejections as vLLM's errors, invalid Unicode as a 400,
``/metrics`` that balances at every scrape and returns to zero when idle, ``/health`` after a
failure, the request limits, and streams ended cleanly at shutdown."""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import threading

import httpx
import pytest
from serve_helpers import WAIT_S, read_first_token_then_leave, wait_for
from servesim_serve.testing import running

FAST = ["engine.timing_model={type: fixed, prefill_ms: 1.0, decode_ms: 1.0}", "serve.speedup=100"]
# A pool of 4 blocks of 16 tokens and no max_model_len: a 296-token prompt can never fit.
TINY_POOL = [*FAST, "engine.num_gpu_blocks=4"]
LONG_PROMPT = list(range(4, 300))
REJECTION = ("The engine rejected this request: its 296 input tokens and 4 output tokens can never "
             "fit in the model's KV cache. Please reduce the length of the input prompt or the "
             "number of requested output tokens.")
SLOW = ["engine.timing_model={type: fixed, prefill_ms: 0.001, decode_ms: 60000.0}", "serve.speedup=1"]


# -- engine rejections ---------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/completions", "/chat/completions"])
def test_an_engine_rejection_is_vllms_400_on_both_paths(path: str) -> None:
    chat = path == "/chat/completions"
    prompt = {"messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(300))}]} if chat \
        else {"prompt": LONG_PROMPT}
    with running(TINY_POOL) as s, httpx.Client(timeout=30) as c:
        whole = c.post(s.base + path, json={**prompt, "max_tokens": 4})
        streamed = c.post(s.base + path, json={**prompt, "max_tokens": 4, "stream": True,
                                               "stream_options": {"include_usage": True}})
        report = s.server.report()
    assert whole.status_code == 400
    error = whole.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "input_tokens", 400)
    assert list(error) == ["message", "type", "param", "code"]
    if not chat:
        assert error["message"] == REJECTION
        assert whole.content == (b'{"error":{"message":"' + REJECTION.encode() +
                                 b'","type":"BadRequestError","param":"input_tokens","code":400}}')
    # the stream had started: the error event as vLLM's stream generators send it, then [DONE]
    assert streamed.status_code == 200
    events = streamed.text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert events[-3] == "data: " + json.dumps({"error": error})
    assert not any('"finish_reason"' in e or '"usage"' in e for e in events)
    assert (report["num_requests"], report["failed"], report["completed"]) == (2, 2, 0)


# -- invalid Unicode -------------------------------------------------------------------------

LONE = [
    ("/v1/completions", b'{"prompt": "a \\ud800 b", "max_tokens": 2}'),
    ("/v1/completions", b'{"prompt": "a", "model": "\\ud800"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x\\udfff"}]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "\\ud800", "content": "x"}]}'),
    ("/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}], "stream": true}'),
    ("/tokenize", b'{"prompt": "\\ud800"}'),
    ("/tokenize", b'{"messages": [{"role": "user", "content": "\\udbff"}]}'),
    ("/detokenize", b'{"tokens": [5], "model": "\\ud800"}'),
]


def test_a_lone_surrogate_anywhere_is_a_400_with_a_json_body(capfd) -> None:
    with running(FAST) as s, httpx.Client(timeout=30) as c:
        answers = [c.post(s.url + path, content=raw, headers={"content-type": "application/json"})
                   for path, raw in LONE]
        after = c.post(s.base + "/completions", json={"prompt": "a b", "max_tokens": 2})
    for r in answers:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["type"] == "BadRequestError" and error["code"] == 400
        assert error["message"].startswith("invalid Unicode in the request body: a lone surrogate")
    assert after.status_code == 200
    assert "Traceback" not in capfd.readouterr().err


# -- /metrics --------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-z_:]+)\{([^}]*)\} (\S+)$")


def gauges(text: str) -> dict[str, float]:
    """Sums over engines of the families the balance needs."""
    out = {"success": 0.0, "running": 0.0, "waiting": 0.0, "kv": 0.0}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, value = m.group(1), float(m.group(3))
        key = {"vllm:request_success_total": "success", "vllm:num_requests_running": "running",
               "vllm:num_requests_waiting": "waiting", "vllm:kv_cache_usage_perc": "kv"}.get(name)
        if key is not None:
            out[key] += value
    return out


def test_gauges_return_to_zero_after_one_request() -> None:
    with running(FAST) as s, httpx.Client(timeout=30) as c:
        r = c.post(s.base + "/completions", json={"prompt": list(range(4, 104)), "max_tokens": 3})
        assert r.status_code == 200
        wait_for(lambda: not any(e.pass_in_flight for e in s.server.driver.engines), "the last pass")
        g = gauges(c.get(s.url + "/metrics").text)
    assert (g["success"], g["running"], g["waiting"], g["kv"]) == (1.0, 0.0, 0.0, 0.0)


def test_gauges_return_to_zero_in_a_prefill_decode_split() -> None:
    split = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=200",
             "cluster.prefill_workers=1", "cluster.decode_workers=2", "cluster.handoff_latency_ms=4"]
    with running(split) as s, httpx.Client(timeout=30) as c:
        for i in range(3):
            r = c.post(s.base + "/completions", json={"prompt": list(range(4 + i, 104)), "max_tokens": 4})
            assert r.status_code == 200
        driver = s.server.driver
        wait_for(lambda: driver.in_flight == 0 and not driver._heap, "the split to go idle")
        g = gauges(c.get(s.url + "/metrics").text)
    assert (g["success"], g["running"], g["waiting"], g["kv"]) == (3.0, 0.0, 0.0, 0.0)


async def _load(url: str, plans: list[tuple[list[int], int, bool]], scrapes: list) -> None:
    """Every plan as a stream (at most 16 at once); a leaver reads one chunk and closes. A
    scraper reads /metrics until the last stream is done."""
    sem = asyncio.Semaphore(16)
    done = asyncio.Event()

    async def one(client: httpx.AsyncClient, prompt: list[int], max_tokens: int, leave: bool) -> None:
        async with sem:
            body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True}
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if leave and line.startswith("data: "):
                        return

    async def scrape(client: httpx.AsyncClient) -> None:
        for _ in range(10_000):  # bounded; the load ends well before
            scrapes.append((await client.get(url + "/metrics")).text)
            if done.is_set():
                return
            await asyncio.sleep(0.002)

    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        scraper = asyncio.ensure_future(scrape(client))
        await asyncio.gather(*(one(client, *p) for p in plans))
        done.set()
        await scraper


def test_metrics_balance_at_every_scrape_under_load_with_cancellations() -> None:
    """started = finished (every finished_reason, aborts being the cancellations) + running +
    waiting, read together at each scrape (the render and the count run on the server's loop
    in one go); idle, every gauge is 0."""
    rng = random.Random(46)
    plans = [([4 + rng.randrange(8)] * 32 + [rng.randrange(4, 1000) for _ in range(rng.randrange(1, 40))],
              rng.randrange(2, 12) if rng.random() >= 0.3 else 1_000, False) for _ in range(80)]
    plans = [(p, n, n == 1_000) for p, n, _ in plans]
    sets = ["engine.timing_model={type: fixed, prefill_ms: 4.0, decode_ms: 2.0}", "serve.speedup=1",
            "engine.num_gpu_blocks=64"]
    scrapes: list[str] = []
    with running(sets) as s:
        driver, observer = s.server.driver, s.server.observer
        seen: list[tuple[int, bytes]] = []
        render = observer.render

        def counted_render() -> bytes:
            body = render()
            seen.append((sum(1 for r in driver.requests if not r.rejected), body))
            return body

        observer.render = counted_render
        asyncio.run(_load(s.url, plans, scrapes))
        wait_for(lambda: driver.in_flight == 0, "every request to end")
        wait_for(lambda: not any(e.pass_in_flight for e in driver.engines), "the last passes")
        final = gauges(httpx.get(s.url + "/metrics", timeout=30).text)
        report = s.server.report()
    assert len(seen) >= 3
    busy = 0
    for started, body in seen:
        g = gauges(body.decode())
        assert started == g["success"] + g["running"] + g["waiting"], (started, g)
        busy += g["running"] > 0
    assert busy > 0  # some scrapes saw requests running
    leavers = sum(1 for p in plans if p[2])
    assert (report["num_requests"], report["num_cancelled"], report["failed"]) == (80, leavers, leavers)
    assert (final["success"], final["running"], final["waiting"], final["kv"]) == (80.0, 0.0, 0.0, 0.0)


# -- failed and cancelled ----------------------------------------------------------------------


def test_a_cancelled_request_counts_as_failed_and_cancelled() -> None:
    with running(SLOW) as s:
        read_first_token_then_leave(s.base + "/completions",
                                    {"prompt": "a b c", "max_tokens": 5, "stream": True})
        (req,) = s.server.driver.requests
        wait_for(lambda: req.cancelled, "the cancellation")
        report = s.server.report()
        (line,) = s.server.per_request_lines()
    assert (report["completed"], report["failed"], report["num_cancelled"]) == (0, 1, 1)
    record = json.loads(line)
    assert (record["rejected"], record["cancelled"]) == (True, True)


# -- /health ---------------------------------------------------------------------------------


def test_health_turns_503_once_the_simulation_has_stopped() -> None:
    sets = [*FAST, "sinks.kv_events=[{type: memory}]"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        assert c.get(s.url + "/health").status_code == 200
        (sink,) = s.server.driver.kv_sinks
        sink.close()  # a closed memory sink fails every publish
        c.post(s.base + "/completions", json={"prompt": list(range(4, 104)), "max_tokens": 2})
        assert s.server.driver.failure is not None
        health = c.get(s.url + "/health")
    assert (health.status_code, health.content) == (503, b"")


def test_gauges_read_zero_once_the_simulation_has_stopped() -> None:
    """A sink failure stops the simulation with requests in flight: they are aborted, so
    /metrics counts them finished (reason abort) and nothing running, waiting or in KV, though
    the engines, no longer stepped, still hold them; started = finished + running + waiting."""
    sets = ["engine.timing_model={type: fixed, prefill_ms: 10.0, decode_ms: 2.0}", "serve.speedup=1",
            "sinks.kv_events=[{type: memory}]"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        driver = s.server.driver
        (sink,) = driver.kv_sinks
        sink.close()  # a closed memory sink fails every publish
        streams = [c.post(s.base + "/completions", json={"prompt": list(range(4 + i, 104)), "max_tokens": 50,
                                                         "stream": True}).text for i in range(3)]
        assert driver.failure is not None
        held = sum(r.metrics().running_requests + r.metrics().waiting_requests
                   for e in driver.engines for r in e.ranks)
        text = c.get(s.url + "/metrics").text
    started = sum(1 for r in driver.requests if not r.rejected)
    g = gauges(text)
    assert held >= 1  # the stopped engine still holds the aborted request
    assert (started, g["success"], g["running"], g["waiting"], g["kv"]) == (1, 1.0, 0.0, 0.0, 0.0)
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="servesim"} 1.0' in text
    assert (driver.in_flight, driver.queued) == (0, 0)
    assert streams[0].endswith("data: [DONE]\n\n")  # the aborted stream; later requests were refused
    assert all(json.loads(x)["error"]["type"] == "InternalServerError" for x in streams[1:])


# -- limits ----------------------------------------------------------------------------------


def _raw(port: int, data: bytes, *, read_until_close: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            if not read_until_close:
                return b"".join(chunks)


def test_an_oversized_body_is_a_413_json_error() -> None:
    sets = [*FAST, "serve.max_body_bytes=1000"]
    with running(sets) as s, httpx.Client(timeout=30) as c:
        port = int(s.url.rsplit(":", 1)[1])
        declared = c.post(s.base + "/completions", content=b'{"prompt": "' + b"a " * 1000 + b'"}')
        # no Content-Length: a chunked body that passes the limit as it comes
        parts = [b'{"prompt": "', b"a " * 600, b"a " * 600, b'"}']
        chunked = c.post(s.base + "/completions", content=iter(parts))
        tok = c.post(s.url + "/tokenize", content=b'{"prompt": "' + b"a " * 1000 + b'"}')
        ok = c.post(s.base + "/completions", json={"prompt": "a b", "max_tokens": 2})
        # the server does not wait for a body it will not read: the answer comes at once
        head = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: 100000000\r\n\r\n")
        early = _raw(port, head)
    for r in (declared, chunked, tok):
        assert r.status_code == 413
        assert r.json() == {"error": {"message": "the request body exceeds 1000 bytes (serve.max_body_bytes)",
                                      "type": "Request Entity Too Large", "param": None, "code": 413}}
    assert declared.headers["connection"] == "close"
    assert ok.status_code == 200
    assert early.startswith(b"HTTP/1.1 413 ")


def test_oversized_headers_are_a_431_and_the_connection_closes() -> None:
    sets = [*FAST, "serve.max_header_bytes=2048"]
    with running(sets) as s:
        port = int(s.url.rsplit(":", 1)[1])
        big = b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 4000 + b"\r\n\r\n"
        whole = _raw(port, big)
        # a header that never ends: cut off once the bytes pass the limit
        endless = _raw(port, b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 3000)
        fine = _raw(port, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    for answer in (whole, endless):
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
        assert json.loads(body)["error"]["code"] == 431
    assert fine.startswith(b"HTTP/1.1 200 ")


def test_a_connection_that_never_completes_its_headers_is_closed() -> None:
    sets = [*FAST, "serve.header_timeout_s=0.2"]
    with running(sets) as s:
        port = int(s.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as idle, \
                socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nho")
            assert idle.recv(1) == b""  # closed by the server (a timeout here fails the test)
            assert slow.recv(1) == b""
        # a complete request is unaffected, and its connection kept alive past the timeout's start
        with httpx.Client(timeout=30) as c:
            assert c.get(s.url + "/health").status_code == 200


def test_the_limits_reach_uvicorn_and_the_protocol() -> None:
    from servesim_serve.app import Server
    from servesim_serve.cli import load, uvicorn_config

    loaded, cfg = load(None, ["serve.keep_alive_timeout_s=7.5", "serve.limit_concurrency=12",
                              "serve.max_header_bytes=999", "serve.header_timeout_s=3"])
    server = Server(loaded, cfg)
    try:
        config = uvicorn_config(server)
    finally:
        server.stop()
    assert (config.timeout_keep_alive, config.limit_concurrency) == (7.5, 12)
    assert (config.http.max_header_bytes, config.http.header_timeout_s) == (999, 3.0)
    defaults = load(None, [])[1]
    assert (defaults.max_body_bytes, defaults.max_header_bytes) == (16 * 1024 * 1024, 16 * 1024)
    assert (defaults.header_timeout_s, defaults.keep_alive_timeout_s, defaults.limit_concurrency) == (
        30.0, 5.0, None)


def test_limits_are_checked_in_the_config() -> None:
    from servesim.errors import ConfigError
    from servesim_serve.cli import load

    for key, value in (("max_body_bytes", "0"), ("max_header_bytes", "-1"), ("header_timeout_s", "0"),
                       ("keep_alive_timeout_s", ".nan"), ("limit_concurrency", "0")):
        with pytest.raises(ConfigError) as info:
            load(None, [f"serve.{key}={value}"])
        assert info.value.path == f"serve.{key}"


# -- shutdown --------------------------------------------------------------------------------


SLOW_SPLIT = ["engine.timing_model={type: fixed, prefill_ms: 0.001, decode_ms: 60000.0}", "serve.speedup=1",
              "cluster.prefill_workers=1", "cluster.decode_workers=1", "cluster.handoff_latency_ms=0.001"]


@pytest.mark.parametrize(("chat", "sets"), [(False, SLOW), (True, SLOW), (False, SLOW_SPLIT)],
                         ids=["completion", "chat", "split"])
def test_shutdown_ends_open_requests_with_an_abort_and_done(chat: bool, sets: list[str], capfd) -> None:
    """Stopped with a stream and a whole-body request open (each would take minutes): after
    the grace period the stream gets its last chunk (``finish_reason: "abort"``), the usage
    chunk and ``[DONE]``; the whole body comes with that finish reason; no traceback."""
    path = "/chat/completions" if chat else "/completions"
    body = ({"messages": [{"role": "user", "content": "a b"}]} if chat else {"prompt": "a b"})
    body.update(max_tokens=50, stream=True, stream_options={"include_usage": True})
    lines: list[str] = []
    wholes: list[httpx.Response] = []
    first = threading.Event()  # the stream's first chunk has come

    def stream(url: str) -> None:
        with httpx.Client(timeout=30) as c, c.stream("POST", url + path, json=body) as r:
            for line in r.iter_lines():
                lines.append(line)
                first.set()

    with running(sets) as s:
        reader = threading.Thread(target=stream, args=(s.base,))
        reader.start()
        if sets is SLOW:
            assert first.wait(WAIT_S)  # a split's first token is the decode pass's: a minute away
        else:
            wait_for(lambda: len(s.server.driver.requests) == 1, "the stream's request")
        whole = threading.Thread(target=lambda: wholes.append(httpx.post(
            s.base + path, json={**body, "stream": False, "stream_options": None}, timeout=30)))
        whole.start()
        wait_for(lambda: len(s.server.driver.requests) == 2, "the whole-body request")
        server = s.server
    reader.join(WAIT_S)
    whole.join(WAIT_S)
    assert not reader.is_alive() and not whole.is_alive()
    data = [x[len("data: "):] for x in lines if x.startswith("data: ")]
    assert data[-1] == "[DONE]"
    usage, last = json.loads(data[-2]), json.loads(data[-3])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == (1 if sets is SLOW else 0)
    assert last["choices"][0]["finish_reason"] == "abort"
    assert all(json.loads(d)["choices"][0]["finish_reason"] is None for d in data[:-3])
    (answer,) = wholes
    assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"] == "abort"
    report = server.report()
    assert (report["num_cancelled"], report["failed"], report["num_unfinished"]) == (2, 2, 0)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ASGI" not in err
