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
