"""Reading OpenAI requests: the fields the simulation needs, every other field tolerated.

Problems raise :class:`ApiError` with vLLM's status, error type and message
(``serve/engine/serving.py``, ``renderers/params.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from attrs import define

from servesim_serve.tokenizer import Tokenizer


class ApiError(Exception):
    """An error answered in OpenAI's error shape."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param


@define
class GenRequest:
    """One generation request, parsed."""

    prompt: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    chat: bool


_decode = msgspec.json.Decoder().decode


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body's JSON. msgspec decodes it (a third of the stdlib's time for a long
    token-id prompt); what msgspec refuses goes to the stdlib's ``json``, which decides, so
    that the accepted bodies, their values and the error messages are the stdlib's: it also
    accepts ``NaN``, ``Infinity``, out-of-range numbers and UTF-16/32 bodies, and its messages
    say where the JSON is malformed. A lone surrogate escape (``"\\ud800"``), which the stdlib
    decodes into a string no UTF-8 can carry, is a 400."""
    try:
        body = _decode(raw)
    except (msgspec.DecodeError, RecursionError):
        body = _stdlib_json(raw)
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    return body


def _stdlib_json(raw: bytes) -> Any:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:  # Recursion: deep nesting
        raise ApiError(f"invalid JSON in the request body: {exc}") from None
    # The stdlib decodes a lone surrogate escape ("\ud800") into a str no UTF-8 can carry:
    # refused here, once, rather than failing wherever the text is encoded later (msgspec's
    # strings are always valid, so only this path needs the check).
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ApiError("invalid Unicode in the request body: a lone surrogate "
                       f"(\\u{ord(exc.object[exc.start]):04x}) is not a character") from None
    except RecursionError:  # as deep as json.loads took: not reached in practice
        pass
    return body


def rejection(prompt_len: int, max_tokens: int) -> ApiError:
    """A request the engine refused (it could never fit the KV cache): a 400
    ``BadRequestError`` with ``param: "input_tokens"``, as vLLM answers a request its input
    checks refuse (``VLLMValidationError`` through ``create_error_response``,
    ``vllm/entrypoints/openai/engine/serving.py``)."""
    return ApiError(f"The engine rejected this request: its {prompt_len} input tokens and "
                    f"{max_tokens} output tokens can never fit in the model's KV cache. Please "
                    "reduce the length of the input prompt or the number of requested output "
                    "tokens.", param="input_tokens")


def injected_rejection(reason: str) -> ApiError:
    """A request an injected fault turned away on arrival (``faults.rejections``,
    docs/elastic.md): ``context_length`` as vLLM answers a prompt over the model's context (a
    400 ``BadRequestError``, ``param: "input_tokens"``), any other reason (``overloaded``) as a
    server that cannot take the request now: a 503 ``ServiceUnavailableError``. The message
    names the reason."""
    message = f"The request was rejected on arrival (injected fault: {reason})."
    if reason == "context_length":
        return ApiError(message, param="input_tokens")
    return ApiError(message, 503, "ServiceUnavailableError")


def refusal(req: Any) -> ApiError:
    """The error a refused request's client gets: an injected rejection's, else the engine's."""
    if req.injected is not None:
        return injected_rejection(req.injected)
    return rejection(req.prompt_len, req.max_tokens)


def engine_failure(message: str) -> ApiError:
    """A request its engine failed (its worker crashed or was removed under it): a 500
    ``InternalServerError``, as vLLM answers a request whose engine died (``EngineDeadError``
    is a ``VLLMServerError``: ``create_error_response``,
    ``vllm/entrypoints/serve/exception_handling/error_response.py``, v0.32)."""
    return ApiError(message, 500, "InternalServerError")


def served_adapters(engine: Any) -> dict[str, int]:
    """The LoRA adapters a request's ``model`` may name, by name: ``engine.lora_modules``
    (an unnamed one is ``adapter-<id>``), none while ``engine.enable_lora`` is off."""
    if not engine.enable_lora:
        return {}
    from servesim.mechanics.lora import served_adapters as by_name

    return by_name(engine.lora_modules)


def check_model(body: dict[str, Any], served: str, adapters: Mapping[str, int] | None = None) -> int:
    """The LoRA adapter id the request's ``model`` names (0: the served base model, or no
    ``model``); vLLM's 404 for any other name, adapters included
    (vllm/entrypoints/serve/engine/serving.py ``_check_model``, v0.32)."""
    model = body.get("model")
    if model is None or model == served:
        return 0
    if adapters and isinstance(model, str) and model in adapters:
        return adapters[model]
    raise ApiError(f"The model `{model}` does not exist. Valid aliases: {served}.",
                   404, "NotFoundError", "model")


def _int_field(body: dict[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(f"{key} must be an integer >= {minimum}, got {value!r}", param=key)
    return value


def _stream_options(body: dict[str, Any], stream: bool) -> tuple[bool, bool]:
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not isinstance(opts, dict):
        raise ApiError("stream_options must be an object", param="stream_options")
    if not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", param="stream_options")
    include = bool(opts.get("include_usage"))
    return include, include and bool(opts.get("continuous_usage_stats"))


_TOKEN_IDS = list[Annotated[int, msgspec.Meta(ge=0)]]
_convert = msgspec.convert


def token_ids(items: list[Any]) -> list[int] | None:
    """A copy of ``items`` if every item is a token id: an int (a bool is not one) >= 0, of
    any size; else None. (msgspec checks and copies in one pass in C, about 4 us for 600 ids,
    against 15 us for a type set and a minimum.)"""
    try:
        return _convert(items, _TOKEN_IDS)
    except msgspec.ValidationError:
        return None


def completion_prompt(body: dict[str, Any], tok: Tokenizer) -> list[int]:
    """``prompt``: a string, token ids, or a one-element list of either."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tok.encode(prompt)
    if isinstance(prompt, list):
        ids = token_ids(prompt)
        if ids is not None:
            return ids
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError("only one prompt per request is supported", param="prompt")
    raise ApiError("prompt must be a string, a list of token ids, or a one-element list of either",
                   param="prompt")


def _content_text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif not isinstance(part, dict):
                raise ApiError(f"messages[{i}].content parts must be objects", param="messages")
        return " ".join(texts)
    raise ApiError(f"messages[{i}].content must be a string or a list of parts", param="messages")


def chat_prompt(body: dict[str, Any], tok: Tokenizer) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list", param="messages")
    flat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a role", param="messages")
        flat.append({"role": m["role"], "content": _content_text(m.get("content"), i)})
    return tok.encode(tok.render_chat(flat))


def parse_generation(body: dict[str, Any], tok: Tokenizer, *, chat: bool, default_max_tokens: int,
                     max_model_len: int | None) -> GenRequest:
    """The request's prompt ids and output length (``max_completion_tokens`` first for chat)."""
    n = _int_field(body, "n", 1)
    if n not in (None, 1):
        raise ApiError("only n = 1 is supported", param="n")
    prompt = chat_prompt(body, tok) if chat else completion_prompt(body, tok)
    requested = _int_field(body, "max_completion_tokens", 1) if chat else None
    if requested is None:
        requested = _int_field(body, "max_tokens", 1)
    if not prompt:
        raise ApiError("the prompt is empty (at least one token is needed)", param="prompt")
    if max_model_len is not None:
        check_length(len(prompt), requested, max_model_len)
    if requested is None:
        requested = default_max_tokens
        if max_model_len is not None:
            requested = min(requested, max_model_len - len(prompt))
    stream = bool(body.get("stream"))
    include, continuous = _stream_options(body, stream)
    return GenRequest(prompt, requested, stream, include, continuous, chat)


def check_length(prompt_len: int, requested: int | None, max_model_len: int) -> None:
    if prompt_len >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
            f"contains {prompt_len} input tokens, which exceeds this limit even without any output "
            f"tokens. Please reduce the length of the input prompt.", param="input_tokens")
    if requested is not None and prompt_len + requested > max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{requested} output tokens and your prompt contains {prompt_len} input tokens, for a "
            f"total of {prompt_len + requested} tokens. Please reduce the length of the input prompt "
            f"or the number of requested output tokens.", param="max_tokens")
