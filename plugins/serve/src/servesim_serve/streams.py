"""One generation request from submission to its last byte: SSE chunks or a whole body.

Tokens are sent as the driver releases them, one chunk per pass, as vLLM sends one per engine
step; a stream more than :data:`MERGE_AFTER` passes behind gets what piled up in one chunk, as
vLLM's output collector merges the outputs its consumer has not taken yet
(``vllm/v1/engine/output_processor.py``), so an overloaded server catches up. A stream the
client leaves, or a whole-body request whose client disconnects, is cancelled on its engine.
With reasoning, the chat thinking span ``[start, ..., end]`` streams as reasoning deltas; its
boundary tokens send no chunk, as vLLM's reasoning parsers drop them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from servesim_serve import wire
from servesim_serve.protocol import GenRequest

# Passes a stream may lag before their tokens go out merged in one chunk.
MERGE_AFTER = 16

if TYPE_CHECKING:
    from starlette.requests import Request

    from servesim_serve.app import Server
    from servesim_serve.records import LiveRequest


class Generation:
    """A submitted request and how to render its output tokens."""

    def __init__(self, server: Server, gen: GenRequest, req: LiveRequest, rid: str, created: int) -> None:
        self.server = server
        self.gen = gen
        self.req = req
        self.rid = rid
        self.created = created
        self.model = server.cfg.model
        self.thinking = req.thinking if gen.chat else 0

    def token_id(self, j: int) -> int:
        """The ``j``-th output token: thinking boundaries, else the tokenizer's pool."""
        r = self.server.cfg.reasoning
        if self.req.thinking and r is not None:
            if j == 0:
                return r.start_thinking_token_id
            if j == self.req.thinking - 1:
                return r.end_thinking_token_id
        pool = self.server.tokenizer.output_pool
        return pool[j % len(pool)]

    def part(self, j: int) -> tuple[str | None, bool]:
        """``(text, is_reasoning)`` of token ``j``; text None for a thinking boundary (chat)."""
        t = self.thinking
        if t and j < t:
            if j == 0 or j == t - 1:
                return None, True
            return self.server.tokenizer.piece(self.token_id(j), j == 1), True
        return self.server.tokenizer.piece(self.token_id(j), j == t), False

    # -- whole bodies ------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        req, gen = self.req, self.gen
        n = len(req.times)
        if not gen.chat:
            tok = self.server.tokenizer
            whole = "".join(tok.piece(self.token_id(j), j == 0) for j in range(n))
            return wire.completion_response(self.rid, self.created, self.model, whole, "length",
                                            req.prompt_len, n, req.cached_tokens())
        content: list[str] = []
        reasoning: list[str] = []
        for j in range(n):
            text, is_reasoning = self.part(j)
            if text is not None:
                (reasoning if is_reasoning else content).append(text)
        return wire.chat_response(self.rid, self.created, self.model, "".join(content),
                                  "".join(reasoning) if self.thinking else None, "length",
                                  req.prompt_len, n, req.cached_tokens())

    # -- streams -------------------------------------------------------------------------

    def _chunks(self, start: int, end: int, last: bool) -> list[dict[str, Any]]:
        """The chunks of tokens ``start..end-1``: one chunk for the completion's text, for chat
        one per run of reasoning or answer text (a boundary token adds no text)."""
        gen = self.gen
        finish = self.finish_reason() if last else None
        usage = (self.req.prompt_len, end) if gen.continuous_usage else None
        if not gen.chat:
            tok = self.server.tokenizer
            whole = "".join(tok.piece(self.token_id(j), j == 0) for j in range(start, end))
            return [wire.completion_chunk(self.rid, self.created, self.model, whole, finish, usage)]
        runs: list[tuple[bool, list[str]]] = []
        for j in range(start, end):
            piece, is_reasoning = self.part(j)
            if piece is None:
                continue
            if runs and runs[-1][0] == is_reasoning:
                runs[-1][1].append(piece)
            else:
                runs.append((is_reasoning, [piece]))
        if not runs:
            if not last:
                return []
            runs = [(False, [""])]
        out = []
        for i, (is_reasoning, texts) in enumerate(runs):
            final = i == len(runs) - 1
            out.append(wire.chat_chunk(self.rid, self.created, self.model,
                                       wire.chat_delta("".join(texts), is_reasoning),
                                       finish if final else None, usage))
        return out

    async def events(self) -> AsyncIterator[str]:
        """The SSE body; leaving it early (the client went away) cancels the request."""
        req, gen = self.req, self.gen
        sent = step = 0
        closed = False  # a chunk with the finish reason went out
        try:
            while not closed:
                await req.wait(sent)
                n = len(req.times)
                if gen.chat and sent == 0 and n:
                    prompt = req.prompt_len if gen.continuous_usage else None
                    yield wire.sse(wire.chat_role_chunk(self.rid, self.created, self.model, prompt))
                steps = req.steps[step:]
                step += len(steps)
                if len(steps) > MERGE_AFTER:
                    steps = steps[-1:]
                for end in steps:
                    closed = req.finished and end == n
                    for chunk in self._chunks(sent, end, closed):
                        yield wire.sse(chunk)
                    sent = end
                if req.finished and not closed:
                    # An end without a token in its pass (a rejection at admission).
                    yield wire.sse(self._end_chunk())
                    closed = True
            if gen.include_usage:
                obj = "chat.completion.chunk" if gen.chat else "text_completion"
                yield wire.sse(wire.usage_chunk(self.rid, obj, self.created, self.model,
                                                req.prompt_len, len(req.times), req.cached_tokens()))
            yield wire.SSE_DONE
        finally:
            self.server.driver.cancel(req)

    def finish_reason(self) -> str:
        """``length`` (the output length was reached), or ``abort`` for a request the engine
        rejected or the simulation dropped."""
        return "abort" if self.req.rejected or self.req.aborted else "length"

    def _end_chunk(self) -> dict[str, Any]:
        finish = self.finish_reason()
        if self.gen.chat:
            return wire.chat_chunk(self.rid, self.created, self.model, wire.chat_delta("", False), finish)
        return wire.completion_chunk(self.rid, self.created, self.model, "", finish)

    async def until_done(self, http: Request) -> bool:
        """Wait for the request to finish; False (and cancelled) if the client disconnected."""
        done = asyncio.ensure_future(self._finished())
        gone = asyncio.ensure_future(_disconnected(http))
        try:
            await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            done.cancel()
        if not self.req.finished:
            self.server.driver.cancel(self.req)
            return False
        return not self.req.cancelled

    async def _finished(self) -> None:
        while not self.req.finished:
            await self.req.wait(len(self.req.times))


async def _disconnected(http: Request) -> None:
    while True:
        message = await http.receive()
        if message["type"] == "http.disconnect":
            return
