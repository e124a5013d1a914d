"""SSE chunk bytes of one request, from parts computed once per request.

A stream writes one chunk per pass per request, so the chunk is built from the request's
fixed prefix (``id``, ``object``, ``created``, ``model``), the token text already escaped
(:meth:`ChunkBytes.text`, cached per token) and fixed tails: no dict and no JSON encoder per
chunk. The bytes are those of ``wire.sse(wire.completion_chunk(...))`` and
``wire.sse(wire.chat_chunk(...))`` (vLLM's shapes; ``tests/test_chunk_bytes.py`` compares them).
JSON escaping works character by character, so the escaped text of a run of pieces is the
concatenation of the pieces' escaped texts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence

from servesim_serve import wire

_FINISH = {None: b"null", "length": b'"length"', "abort": b'"abort"'}
_COMPLETION_TAIL = b',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]'


def escaped(text: str) -> bytes:
    """``text`` as the inside of a JSON string (no quotes), as ``wire.dumps`` escapes it."""
    return wire.dumps(text)[1:-1].encode("utf-8")


def unescaped(text: bytes) -> str:
    """The inverse of :func:`escaped`."""
    return json.loads(b'"' + text + b'"')


class PieceCache:
    """The escaped text of output tokens, per ``(token id, first)``: ``piece`` is the
    tokenizer's (``Tokenizer.piece``); a server holds one cache for every request."""

    def __init__(self, piece: Callable[[int, bool], str]) -> None:
        self._piece = piece
        self._cache: dict[tuple[int, bool], bytes] = {}

    def get(self, token_id: int, first: bool) -> bytes:
        key = (token_id, first)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = escaped(self._piece(token_id, first))
        return out


class PlainTails:
    """What follows the opening of a completion chunk that carries output token ``j`` alone
    and no finish reason, usage or thinking span (most chunks of a plain stream), from its
    escaped text to the SSE event's end: one bytes object per token of the output pool,
    built once per server."""

    def __init__(self, pieces: PieceCache, pool: Sequence[int]) -> None:
        self._pieces = pieces
        self._pool = pool
        self._tails: dict[int, bytes] = {}  # j % len(pool), or -1 for j == 0 (the first token)

    def get(self, j: int) -> bytes:
        pool = self._pool
        key = j % len(pool) if j else -1
        tail = self._tails.get(key)
        if tail is None:
            text = self._pieces.get(pool[j % len(pool)], j == 0)
            tail = self._tails[key] = (b'"' + text + b'","logprobs":null,"finish_reason":null'
                                       + _COMPLETION_TAIL + b"}\n\n")
        return tail


class ChunkBytes:
    """The SSE chunks of one request (``chat``: ``chat.completion.chunk``, else
    ``text_completion``)."""

    __slots__ = ("pre",)

    def __init__(self, rid: str, created: int, model: str, chat: bool) -> None:
        # The opening of every chunk: 'data: {"id":...,"object":...,"created":...,"model":...,
        # "choices":[{"index":0,"text":' (or '"delta":'), the JSON of wire.dumps.
        rid_bytes = rid.encode("ascii") if _plain(rid) else escaped(rid)
        before, after = _head_tails(model, chat)
        self.pre = b'data: {"id":"%s",%s%d%s' % (rid_bytes, before, created, after)

    def completion(self, text: bytes, finish: str | None, usage: tuple[int, int] | None = None) -> bytes:
        """``text``: escaped (:func:`escaped`); ``usage``: (prompt, completion) tokens so far."""
        parts = [self.pre, b'"', text, b'","logprobs":null,"finish_reason":', _FINISH[finish],
                 _COMPLETION_TAIL]
        if usage is not None:
            p, c = usage
            parts.append(b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}'
                         % (p, p + c, c))
        parts.append(b"}\n\n")
        return b"".join(parts)

    def chat(self, text: bytes, reasoning: bool, finish: str | None,
             usage: tuple[int, int] | None = None) -> bytes:
        """A delta chunk: ``content``, or the thinking text under ``reasoning`` and
        ``reasoning_content``."""
        if reasoning:
            delta = [b'{"reasoning":"', text, b'","reasoning_content":"', text, b'"}']
        else:
            delta = [b'{"content":"', text, b'"}']
        parts = [self.pre, *delta, b',"logprobs":null,"finish_reason":', _FINISH[finish]]
        if finish is not None:
            parts.append(b',"stop_reason":null')
        parts.append(b',"token_ids":null}]')
        if usage is not None:
            p, c = usage
            parts.append(b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
                         b'"completion_tokens_details":null}' % (p, p + c, c))
        parts.append(b"}\n\n")
        return b"".join(parts)


def _plain(text: str) -> bool:
    """``text`` needs no JSON escaping (ASCII letters, digits and dashes, as request ids)."""
    return text.isascii() and text.replace("-", "").isalnum()


@functools.lru_cache(maxsize=64)
def _head_tails(model: str, chat: bool) -> tuple[bytes, bytes]:
    obj = "chat.completion.chunk" if chat else "text_completion"
    opening = "delta" if chat else "text"
    model_json = wire.dumps(model).encode("utf-8")
    return (b'"object":"%s","created":' % obj.encode("ascii"),
            b',"model":%s,"choices":[{"index":0,"%s":' % (model_json, opening.encode()))


def join_text(pieces: Sequence[bytes]) -> bytes:
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
