"""The ``serve:`` config section (docs/configuration.md, docs/serve.md).

The section is owned by this plugin: ``servesim serve`` hands :class:`ServeConfig` to the core
loader as an extra top-level section, so the one converter structures it (unknown keys
forbidden) and its values are range-checked here, each problem naming its key path.
"""

from __future__ import annotations

import math
from typing import Any

from attrs import frozen
from servesim.errors import ConfigError


@frozen(kw_only=True)
class ReasoningConfig:
    """dynamo-mocker.md §8.2 (ReasoningConfig): the first ``num_thinking_tokens(osl)`` output
    tokens form the thinking span ``[start, ..., end]``; the rest is the answer."""

    thinking_ratio: float
    start_thinking_token_id: int
    end_thinking_token_id: int

    def num_thinking_tokens(self, osl: int) -> int:
        """0 below two tokens; else ``floor(osl * ratio)`` clamped to ``[2, osl]`` (0 stays 0)."""
        if osl < 2:
            return 0
        raw = math.floor(osl * self.thinking_ratio)
        return 0 if raw == 0 else min(max(raw, 2), osl)


@frozen(kw_only=True)
class ServeConfig:
    """``serve:``: where to listen, the served model name, the pacing and the tokenizer.

    * ``speedup``: simulated ms per wall ms (10 plays a simulated second in 100 wall ms).
    * ``tokenizer``: null for the built-in one (one token per whitespace-separated word),
      else a Hugging Face ``tokenizer.json`` or a folder holding one.
    * ``max_queued_requests``: requests admitted to the server but not yet given a first
      token; beyond it a request is answered 503. Null: unbounded.
    * ``default_max_tokens``: the output length when a request gives no ``max_tokens``.
    * ``max_body_bytes``: a request body larger than this is answered 413 without being read
      further (16 MiB: a million-token prompt as token ids).
    * ``max_header_bytes``: a request line plus headers larger than this is answered 431 and
      the connection closed (16 KiB: h11's ``DEFAULT_MAX_INCOMPLETE_EVENT_SIZE``, uvicorn's
      ``h11_max_incomplete_event_size`` default; the httptools parser has no limit of its own).
    * ``header_timeout_s``: a connection must complete a request's headers within this many
      seconds of opening, or of its previous response's end, else it is closed.
    * ``keep_alive_timeout_s``: an idle kept-alive connection is closed after this many seconds
      (uvicorn's ``timeout_keep_alive``; 5 as in uvicorn and vLLM's
      ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``).
    * ``limit_concurrency``: beyond this many open connections and tasks new requests are
      answered 503 (uvicorn's ``limit_concurrency``). Null: unbounded.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "servesim"
    speedup: float = 1.0
    tokenizer: str | None = None
    max_queued_requests: int | None = None
    default_max_tokens: int = 128
    reasoning: ReasoningConfig | None = None
    max_body_bytes: int = 16 * 1024 * 1024
    max_header_bytes: int = 16 * 1024
    header_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    limit_concurrency: int | None = None


def check_serve(cfg: ServeConfig, source: str | None) -> None:
    """Range checks; the first problem raises a ConfigError naming ``serve.<key>``."""
    problems: list[tuple[str, str, Any]] = []
    if not (math.isfinite(cfg.speedup) and cfg.speedup > 0):
        problems.append(("speedup", "a finite number > 0", cfg.speedup))
    if not 0 <= cfg.port <= 65535:
        problems.append(("port", "an integer in [0, 65535]", cfg.port))
    if not cfg.model:
        problems.append(("model", "a non-empty name", cfg.model))
    if cfg.max_queued_requests is not None and cfg.max_queued_requests < 0:
        problems.append(("max_queued_requests", "an integer >= 0 or null", cfg.max_queued_requests))
    if cfg.default_max_tokens < 1:
        problems.append(("default_max_tokens", "an integer >= 1", cfg.default_max_tokens))
    for key in ("max_body_bytes", "max_header_bytes"):
        if getattr(cfg, key) < 1:
            problems.append((key, "an integer >= 1", getattr(cfg, key)))
    for key in ("header_timeout_s", "keep_alive_timeout_s"):
        value = getattr(cfg, key)
        if not (math.isfinite(value) and value > 0):
            problems.append((key, "a finite number > 0", value))
    if cfg.limit_concurrency is not None and cfg.limit_concurrency < 1:
        problems.append(("limit_concurrency", "an integer >= 1 or null", cfg.limit_concurrency))
    r = cfg.reasoning
    if r is not None:
        if not (math.isfinite(r.thinking_ratio) and 0.0 <= r.thinking_ratio <= 1.0):
            problems.append(("reasoning.thinking_ratio", "a number in [0, 1]", r.thinking_ratio))
        for key in ("start_thinking_token_id", "end_thinking_token_id"):
            if getattr(r, key) < 0:
                problems.append((f"reasoning.{key}", "a token id >= 0", getattr(r, key)))
    if problems:
        key, expected, value = problems[0]
        raise ConfigError(f"expected {expected}, got {value!r}", path=f"serve.{key}", source=source)
