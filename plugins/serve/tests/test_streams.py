"""How a stream turns the passes it has not sent yet into chunks (no server loop involved)."""

from __future__ import annotations

import asyncio
import json

import pytest
from servesim_serve.app import Server
from servesim_serve.cli import load
from servesim_serve.protocol import GenRequest
from servesim_serve.records import LiveRequest
from servesim_serve.streams import MERGE_AFTER, Generation


def finished_request(passes: int) -> LiveRequest:
    req = LiveRequest(0, 3, passes, 0, 0.0)
    for k in range(passes):
        req.times.append(10.0 + 2.0 * k)
        req.steps.append(k + 1)
    req.done_ms = req.times[-1]
    return req


def chunks(req: LiveRequest) -> tuple[int, list[dict]]:
    """How many body writes the stream makes, and its chunks."""
    loaded, cfg = load(None, [])
    gen = GenRequest([5, 6, 7], req.max_tokens, True, False, False, False)
    g = Generation(Server(loaded, cfg), gen, req, "cmpl-x", 0)

    async def collect() -> list[bytes]:
        return [e async for e in g.events()]

    writes = asyncio.run(collect())
    events = b"".join(writes).decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and g.closed
    return len(writes), [json.loads(e[len("data: "):]) for e in events[:-2]]


@pytest.mark.parametrize("passes", [1, 3, MERGE_AFTER])
def test_one_chunk_per_pass(passes: int) -> None:
    writes, out = chunks(finished_request(passes))
    assert writes == 1  # every pass had ended: one write, [DONE] included
    assert [c["choices"][0]["text"] for c in out] == ["w0"] + [f" w{k}" for k in range(1, passes)]
    assert [c["choices"][0]["finish_reason"] for c in out] == [None] * (passes - 1) + ["length"]


def test_a_backlog_beyond_the_limit_goes_out_in_one_chunk() -> None:
    passes = MERGE_AFTER + 1
    writes, (out,) = chunks(finished_request(passes))
    assert writes == 1
    assert out["choices"][0]["text"] == " ".join(f"w{k}" for k in range(passes))
    assert out["choices"][0]["finish_reason"] == "length"


def test_chunks_written_from_the_wake_up_are_the_task_s_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    import httpx
    from servesim_serve import app, receipt
    from servesim_serve.testing import running

    writes = [0]
    write = receipt.ChunkWriter.write

    def counted(self: receipt.ChunkWriter, body: bytes) -> None:
        writes[0] += 1
        write(self, body)

    monkeypatch.setattr(receipt.ChunkWriter, "write", counted)
    # 50 ms of prefill: the stream's handler is waiting long before the first token
    sets = ["engine.timing_model={type: fixed, prefill_ms: 50.0, decode_ms: 5.0}", "serve.speedup=1"]
    bodies = []
    for direct in (True, False):
        if not direct:
            monkeypatch.setattr(app, "chunk_writer", lambda scope: None)
        with running(sets) as s:
            for path, body in (("/completions", {"prompt": "a b c", "max_tokens": 6}),
                               ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 4})):
                with httpx.stream("POST", s.base + path, timeout=30, json={
                        **body, "stream": True, "stream_options": {"include_usage": True}}) as r:
                    raw = b"".join(r.iter_raw())
                bodies.append(re.sub(rb'"(id|created)":("[^"]*"|\d+)', b"", raw))
        if direct:
            assert writes[0] >= 6  # the chunks before each stream's last went out directly
            writes[0] = 0
    assert writes[0] == 0
    assert bodies[:2] == bodies[2:] and bodies[0].count(b"data: ") == 8  # 6 tokens, usage, [DONE]


@pytest.mark.parametrize("tokenizer_pool", [None, [7, 9]])
def test_plain_one_token_chunks_are_the_general_path_s_bytes(tokenizer_pool: list[int] | None) -> None:
    loaded, cfg = load(None, [])
    server = Server(loaded, cfg)
    if tokenizer_pool is not None:  # a short pool: tokens wrap around, the first one included
        from servesim_serve.chunk_bytes import PlainTails

        server.tokenizer.output_pool = tokenizer_pool
        server.plain_tails = PlainTails(server.pieces, tokenizer_pool)
    req = LiveRequest(0, 3, 6, 0, 0.0)
    gen = GenRequest([5, 6, 7], 6, True, True, False, False)
    g = Generation(server, gen, req, "cmpl-x", 0)
    for k in range(5):
        req.times.append(10.0 + k)
        req.steps.append(k + 1)
        assert g.take() == g._chunks(k, k + 1, False)[0]
    assert (g.sent, g.step) == (5, 5)
    req.times.append(20.0)
    req.steps.append(6)
    req.done_ms = 20.0
    last = g.take()
    assert last is not None and last.endswith(b"data: [DONE]\n\n") and b'"finish_reason":"length"' in last
    assert g.closed and g.take() is None
