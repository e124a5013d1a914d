"""The server's JSON bytes equal vLLM's for the same content (tests/data/vllm_wire.json was
written by tools/vllm_wire_shapes.py from vLLM 0.32's own response classes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim_serve import wire

VLLM = json.loads((Path(__file__).parent / "data" / "vllm_wire.json").read_text())
ID, CREATED, MODEL = "ID", 1700000000, "servesim"


def reasoning_as_vllm(body: dict) -> dict:
    """vLLM 0.32 names the thinking text ``reasoning`` only; the server adds the older
    ``reasoning_content`` beside it with the same text."""
    delta = body["choices"][0]["delta"]
    assert delta.pop("reasoning_content") == delta["reasoning"]
    return body


CASES = {
    "completion_chunk": lambda: wire.completion_chunk(ID, CREATED, MODEL, " w1", None),
    "completion_chunk_continuous_usage": lambda: wire.completion_chunk(ID, CREATED, MODEL, " w1", None,
                                                                       (3, 1)),
    "completion_chunk_last": lambda: wire.completion_chunk(ID, CREATED, MODEL, " w2", "length"),
    "completion_usage_chunk": lambda: wire.usage_chunk(ID, "text_completion", CREATED, MODEL, 3, 2, 0),
    "completion_response": lambda: wire.completion_response(ID, CREATED, MODEL, "w1 w2", "length", 3, 2, 0),
    "chat_chunk_role": lambda: wire.chat_role_chunk(ID, CREATED, MODEL),
    "chat_chunk_role_continuous_usage": lambda: wire.chat_role_chunk(ID, CREATED, MODEL, 3),
    "chat_chunk": lambda: wire.chat_chunk(ID, CREATED, MODEL, wire.chat_delta(" w1", False), None),
    "chat_chunk_continuous_usage": lambda: wire.chat_chunk(ID, CREATED, MODEL, wire.chat_delta(" w1", False),
                                                           None, (3, 1)),
    "chat_chunk_reasoning": lambda: reasoning_as_vllm(
        wire.chat_chunk(ID, CREATED, MODEL, wire.chat_delta(" w1", True), None)),
    "chat_chunk_last": lambda: wire.chat_chunk(ID, CREATED, MODEL, wire.chat_delta(" w2", False), "length"),
    "chat_usage_chunk": lambda: wire.usage_chunk(ID, "chat.completion.chunk", CREATED, MODEL, 3, 2, 0),
    "chat_response": lambda: wire.chat_response(ID, CREATED, MODEL, "w1 w2", None, "length", 3, 2, 0),
    "error": lambda: wire.error_body("MSG", "BadRequestError", 400),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bytes_match_vllm(name: str) -> None:
    ours = CASES[name]()
    assert wire.dumps(ours) == wire.dumps(VLLM[name])  # same keys, same order, same values


def test_chat_response_with_reasoning_matches_vllm_plus_reasoning_content() -> None:
    ours = wire.chat_response(ID, CREATED, MODEL, "w2", "w1", "length", 3, 2, 0)
    message = ours["choices"][0]["message"]
    assert message.pop("reasoning_content") == "w1"
    assert wire.dumps(ours) == wire.dumps(VLLM["chat_response_reasoning"])


def test_models_match_vllm_but_for_the_permission_id() -> None:
    ours = wire.models_body(MODEL, MODEL, CREATED, 4096)
    assert ours["data"][0]["permission"][0].pop("id") == "modelperm-servesim"
    theirs = json.loads(json.dumps(VLLM["models"]))
    theirs["data"][0]["permission"][0].pop("id")
    assert wire.dumps(ours) == wire.dumps(theirs)


def test_sse_framing() -> None:
    assert wire.sse({"a": 1}) == 'data: {"a":1}\n\n'
    assert wire.SSE_DONE == "data: [DONE]\n\n"
