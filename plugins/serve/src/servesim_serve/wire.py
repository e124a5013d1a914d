"""Response bodies and SSE chunks in vLLM's shapes (vLLM 0.32: ``openai/completion/serving.py``,
``openai/chat_completion/serving.py``, ``serve/engine/protocol.py``).

Keys come in vLLM's order and with the fields vLLM's serialisation keeps: stream chunks drop
unset fields, the trailing usage chunk drops nulls, whole responses keep every field.
``tests/data/vllm_wire.json`` (written by ``tools/vllm_wire_shapes.py`` from vLLM's own
classes) pins them. Usage always carries ``prompt_tokens_details.cached_tokens``, as vLLM's
``--enable-prompt-tokens-details`` does. Reasoning deltas carry the thinking text under both
``reasoning`` (vLLM >= 0.11) and ``reasoning_content`` (earlier vLLM, SGLang).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def dumps(body: Any) -> str:
    """Compact JSON as pydantic's ``model_dump_json`` writes it."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def sse(body: Any) -> str:
    return f"data: {dumps(body)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def stream_error(message: str, err_type: str, code: int, param: str | None = None) -> str:
    """An error inside a stream, as vLLM's stream generators send one before ``[DONE]``
    (``create_streaming_error_response``, ``vllm/entrypoints/openai/engine/serving.py``: the
    stdlib's ``json.dumps`` of the error body, so with its default separators and escapes)."""
    return f"data: {json.dumps(error_body(message, err_type, code, param))}\n\n"


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}


def _full_usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        **_usage(prompt, completion),
        "prompt_tokens_details": {"cached_tokens": cached, "created_cache_tokens": None,
                                  "multimodal_tokens": None},
        "completion_tokens_details": None,
    }


def usage_chunk(rid: str, obj: str, created: int, model: str, prompt: int, completion: int,
                cached: int) -> dict[str, Any]:
    """The trailing ``stream_options.include_usage`` chunk (no choices)."""
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [],
            "usage": {**_usage(prompt, completion), "prompt_tokens_details": {"cached_tokens": cached}}}


# -- /v1/completions ------------------------------------------------------------------------

def completion_chunk(rid: str, created: int, model: str, text: str, finish: str | None,
                     usage: tuple[int, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None, "prompt_token_ids": None, "token_ids": None}],
    }
    if usage is not None:
        body["usage"] = _usage(*usage)
    return body


def completion_response(rid: str, created: int, model: str, text: str, finish: str,
                        prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                     "prompt_token_ids": None, "routed_experts": None}],
        "service_tier": None, "system_fingerprint": None,
        "usage": _full_usage(prompt, completion, cached),
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


# -- /v1/chat/completions -------------------------------------------------------------------

def _chat_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {**_usage(prompt, completion), "completion_tokens_details": None}


def chat_role_chunk(rid: str, created: int, model: str, prompt: int | None = None) -> dict[str, Any]:
    """The first chunk: the assistant role with empty content (sent with the first token)."""
    body: dict[str, Any] = {
        "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                     "finish_reason": None}],
    }
    if prompt is not None:
        body["usage"] = _chat_usage(prompt, 0)
    body["prompt_token_ids"] = None
    body["prompt_text"] = None
    return body


def chat_delta(text: str, reasoning: bool) -> dict[str, Any]:
    return {"reasoning": text, "reasoning_content": text} if reasoning else {"content": text}


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any], finish: str | None,
               usage: tuple[int, int] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    body: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created,
                            "model": model, "choices": [choice]}
    if usage is not None:
        body["usage"] = _chat_usage(*usage)
    return body


def chat_response(rid: str, created: int, model: str, content: str, reasoning: str | None,
                  finish: str, prompt: int, completion: int, cached: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None,
                               "annotations": None, "audio": None, "function_call": None,
                               "reasoning": reasoning}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None, "token_ids": None, "routed_experts": None}],
        "service_tier": None, "system_fingerprint": None,
        "usage": _full_usage(prompt, completion, cached),
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    }


def models_body(model: str, root: str, created: int, max_model_len: int | None,
                adapters: Sequence[str] = ()) -> dict[str, Any]:
    permission = {
        "id": f"modelperm-{model}", "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
        "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
        "organization": "*", "group": None, "is_blocking": False,
    }
    card = {"id": model, "object": "model", "created": created, "owned_by": "vllm", "root": root,
            "parent": None, "max_model_len": max_model_len, "permission": [permission]}
    # LoRA adapters after the base model, as vLLM's show_available_models lists them
    # (vllm/entrypoints/openai/models/serving.py, v0.32): parent is the base model, root the
    # adapter's path (servesim has none: its name), max_model_len unset.
    cards = [card] + [{**card, "id": name, "root": name, "parent": model, "max_model_len": None,
                       "permission": [{**permission, "id": f"modelperm-{name}"}]}
                      for name in adapters]
    return {"object": "list", "data": cards}
