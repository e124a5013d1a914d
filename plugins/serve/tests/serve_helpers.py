"""What several servesim-serve tests do alike: wait for the server's state, leave a stream
after its first chunk, and send the stream and whole-body pair a crashed worker must answer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from servesim_serve.elastic_driver import ENGINE_DEAD

WAIT_S = 20.0


def wait_for(predicate: Callable[[], Any], what: str, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def read_first_token_then_leave(url: str, body: dict) -> str:
    """The first ``data:`` line of a streamed request, then the client closes its socket."""
    with httpx.Client(timeout=30) as c, c.stream("POST", url, json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                return line
    raise AssertionError("no chunk")


def start_stream_and_whole(c: httpx.Client, base: str) -> tuple[dict[str, Any], list[threading.Thread]]:
    """A streamed and a whole-body completion of 1,000 tokens, each on its own thread; their
    answers land in the returned dict under ``stream`` (the SSE text) and ``whole``."""
    answers: dict[str, Any] = {}

    def stream() -> None:
        body = {"prompt": list(range(4, 40)), "max_tokens": 1000, "stream": True}
        answers["stream"] = c.post(base + "/completions", json=body).text

    def whole() -> None:
        body = {"prompt": list(range(5, 40)), "max_tokens": 1000}
        answers["whole"] = c.post(base + "/completions", json=body)

    threads = [threading.Thread(target=f) for f in (stream, whole)]
    for t in threads:
        t.start()
    return answers, threads


def assert_engine_dead(answers: dict[str, Any], crash: str) -> None:
    """The pair of :func:`start_stream_and_whole` lost with a crashed worker (``crash``: e.g.
    ``worker 0 crashed at 3000 ms``): the stream's tokens, then vLLM's error event and
    ``[DONE]`` (no finish reason, no usage); the whole body vLLM's 500 for a dead engine."""
    events = answers["stream"].split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    error = json.loads(events[-3][len("data: "):])
    message = error["error"]["message"]
    assert message.startswith(f"{ENGINE_DEAD}: {crash}")
    assert error == {"error": {"message": message, "type": "InternalServerError", "param": None, "code": 500}}
    chunks = [json.loads(e[len("data: "):]) for e in events[:-3]]
    assert len(chunks) >= 1 and all(ch["choices"][0]["finish_reason"] is None for ch in chunks)
    whole = answers["whole"]
    assert isinstance(whole, httpx.Response) and whole.status_code == 500
    assert whole.json()["error"]["type"] == "InternalServerError"
    assert whole.json()["error"]["message"].startswith(f"{ENGINE_DEAD}: {crash}")
