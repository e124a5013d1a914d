"""One generation request from submission to its last byte: SSE chunks or a whole body.

Tokens are sent as the driver releases them, one chunk per pass, as vLLM sends one per engine
step; a stream more than :data:`MERGE_AFTER` passes behind gets what piled up in one chunk, as
vLLM's output collector merges the outputs its consumer has not taken yet
(``vllm/v1/engine/output_processor.py``), so an overloaded server catches up. A stream the
client leaves, or a whole-body request whose client disconnects, is cancelled on its engine.
With reasoning, the chat thinking span ``[start, ..., end]`` streams as reasoning deltas; its
boundary tokens send no chunk, as vLLM's reasoning parsers drop them. A completion has the same
thinking span but no reasoning parser (vLLM applies them to chat only): its text is every
token's, boundaries included, except tokens the tokenizer marks special, whose text vLLM's
default ``skip_special_tokens`` drops (the chunk of a pass that gave only such a token has
empty text, as vLLM still sends it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from servesim_serve import wire
from servesim_serve.chunk_bytes import ChunkBytes, join_text, unescaped
from servesim_serve.protocol import GenRequest, engine_failure, refusal

# Passes a stream may lag before their tokens go out merged in one chunk.
MERGE_AFTER = 16
SSE_DONE = wire.SSE_DONE.encode("ascii")

if TYPE_CHECKING:
    from starlette.types import Receive

    from servesim_serve.app import Server
    from servesim_serve.receipt import ChunkWriter
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
        self.thinking = req.thinking if gen.chat else 0  # the span the chat parser splits off
        tok = server.tokenizer
        # A completion's first token with text (a special start-of-thinking token has none).
        self._first_text = 1 if req.thinking and not gen.chat and tok.is_special(self.token_id(0)) else 0
        self.out = ChunkBytes(rid, created, self.model, gen.chat)
        self.closed = False  # the stream's last chunk (and [DONE]) has been produced
        self.left = False  # the client went away
        self.ended_by_server = False  # cancelled at shutdown (Server.end_open_streams)
        self.sent = 0  # output tokens in the messages produced so far
        self.step = 0  # entries of req.steps consumed
        self.sending = False  # the stream's task holds a message it has not written yet
        # A completion with no thinking span nor usage per chunk: a pass's chunk that carries
        # one token and does not end the stream is the opening and PlainTails' bytes.
        self._plain = not gen.chat and not req.thinking and not gen.continuous_usage

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

    def completion_piece(self, j: int) -> bytes:
        """The escaped text token ``j`` adds to a completion (empty for a special token)."""
        token = self.token_id(j)
        if j < self.req.thinking and self.server.tokenizer.is_special(token):
            return b""
        return self.server.pieces.get(token, j == self._first_text)

    # -- whole bodies ------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        req, gen = self.req, self.gen
        n = len(req.times)
        if not gen.chat:
            whole = b"".join(self.completion_piece(j) for j in range(n))
            return wire.completion_response(self.rid, self.created, self.model, unescaped(whole),
                                            self.finish_reason(),
                                            req.prompt_len, n, req.cached_tokens())
        content: list[str] = []
        reasoning: list[str] = []
        for j in range(n):
            text, is_reasoning = self.part(j)
            if text is not None:
                (reasoning if is_reasoning else content).append(text)
        return wire.chat_response(self.rid, self.created, self.model, "".join(content),
                                  "".join(reasoning) if self.thinking else None, self.finish_reason(),
                                  req.prompt_len, n, req.cached_tokens())

    # -- streams -------------------------------------------------------------------------

    def _chunks(self, start: int, end: int, last: bool) -> list[bytes]:
        """The SSE chunks of tokens ``start..end-1``: one chunk for the completion's text, for
        chat one per run of reasoning or answer text (a boundary token adds no text)."""
        gen, out = self.gen, self.out
        finish = self.finish_reason() if last else None
        usage = (self.req.prompt_len, end) if gen.continuous_usage else None
        pieces = self.server.pieces
        if not gen.chat:
            texts = [self.completion_piece(j) for j in range(start, end)]
            return [out.completion(join_text(texts), finish, usage)]
        runs: list[tuple[bool, list[bytes]]] = []
        t = self.thinking
        for j in range(start, end):
            if t and j < t:
                if j == 0 or j == t - 1:
                    continue  # a thinking boundary: no text
                piece, is_reasoning = pieces.get(self.token_id(j), j == 1), True
            else:
                piece, is_reasoning = pieces.get(self.token_id(j), j == t), False
            if runs and runs[-1][0] == is_reasoning:
                runs[-1][1].append(piece)
            else:
                runs.append((is_reasoning, [piece]))
        if not runs:
            if not last:
                return []
            runs = [(False, [b""])]
        final = len(runs) - 1
        return [out.chat(join_text(texts), is_reasoning, finish if i == final else None, usage)
                for i, (is_reasoning, texts) in enumerate(runs)]

    def take(self) -> bytes | None:
        """The body message of what the request gained since the last one (the chunks of its
        new passes; on its end the finish, usage chunk and ``[DONE]`` too), or None."""
        if self.closed:
            return None
        req, gen = self.req, self.gen
        sent = self.sent
        steps_all = req.steps
        if self._plain and len(steps_all) == self.step + 1 and steps_all[-1] == sent + 1 and not req.finished:
            self.step += 1
            self.sent = sent + 1
            return self.out.pre + self.server.plain_tails.get(sent)
        n = len(req.times)
        out: list[bytes] = []
        if gen.chat and sent == 0 and n:
            prompt = req.prompt_len if gen.continuous_usage else None
            out.append(wire.sse(wire.chat_role_chunk(self.rid, self.created, self.model,
                                                     prompt)).encode("utf-8"))
        steps = req.steps[self.step:]
        self.step += len(steps)
        if len(steps) > MERGE_AFTER:
            steps = steps[-1:]
        closed = False  # a chunk with the finish reason went out
        rejected = req.rejected  # ends in an error event, not a finish reason
        for end in steps:
            closed = req.finished and end == n and not rejected
            out.extend(self._chunks(sent, end, closed))
            sent = end
        self.sent = sent
        if req.finished and not closed:
            if rejected:
                # vLLM's stream generators end an error with the error event and [DONE], no
                # finish reason nor usage chunk (``completion/serving.py``); an engine that
                # died mid-stream (``EngineDeadError``) ends it so too.
                err = refusal(req) if req.error is None else engine_failure(req.error)
                out.append(wire.stream_error(err.message, err.err_type, err.status,
                                             err.param).encode("utf-8"))
                out.append(SSE_DONE)
                self.closed = True
                return b"".join(out)
            # An end without a token in its pass (cancelled at shutdown, or aborted).
            out.append(wire.sse(self._end_chunk()).encode("utf-8"))
            closed = True
        if closed:
            out.append(self._trailer())
            self.closed = True
        if not out:
            return None
        return out[0] if len(out) == 1 else b"".join(out)

    async def events(self) -> AsyncGenerator[bytes, None]:
        """The SSE body, one item per pass that gave the request tokens (the pass's chunks
        together; the last item also holds the usage chunk and ``[DONE]``). Leaving it early
        (the client went away) cancels the request. Items :meth:`push` wrote are not here."""
        req = self.req
        try:
            while not self.closed:
                await req.wait(self.sent)
                data = self.take()  # None once push() has written the last message
                if data is not None:
                    self.sending = True  # until the consumer has written it and asks again
                    yield data
                    self.sending = False
        finally:
            self.server.driver.cancel(req)

    def push(self, writer: ChunkWriter) -> bool:
        """Write the request's new chunks now, from the driver's wake-up (no task hop), and
        on its completion its last message, which completes the response. False when the
        stream's task must act: the response is complete (the task only has to return), the
        request ended otherwise (rejected, cancelled, aborted), the task is writing a
        message, or the writer would wait."""
        if self.closed or self.sending or self.left or not writer.ready():
            return False
        req = self.req
        if req.finished:
            if req.done_ms < 0.0 or req.rejected or req.aborted:
                return False
            writer.finish(self.take() or b"")  # a completed request's take() closes the stream
            return True
        data = self.take()
        if data is not None:
            writer.write(data)
        return True

    def _trailer(self) -> bytes:
        """The usage chunk (``stream_options.include_usage``) and ``[DONE]``."""
        req, gen = self.req, self.gen
        if not gen.include_usage:
            return SSE_DONE
        obj = "chat.completion.chunk" if gen.chat else "text_completion"
        usage = wire.usage_chunk(self.rid, obj, self.created, self.model, req.prompt_len,
                                 len(req.times), req.cached_tokens())
        return wire.sse(usage).encode("utf-8") + SSE_DONE

    def finish_reason(self) -> str:
        """``length`` (the output length was reached), or ``abort`` for a request the
        simulation dropped or the server ended at shutdown (a rejected request ends in an
        error instead)."""
        req = self.req
        return "abort" if req.rejected or req.aborted or self.ended_by_server else "length"

    def end_by_server(self) -> None:
        """Shutdown: cancel the request on its engine; its stream ends with an ``abort``
        chunk and ``[DONE]`` (or its whole body with that finish reason)."""
        req = self.req
        if req.finished:
            return
        self.server.driver.cancel(req)
        # Set after: a request that completed in the passes the cancellation caught up with
        # keeps its own ending (and its stream's wake-up, never synchronous for a cancelled
        # request, finds the flag set).
        self.ended_by_server = req.cancelled
        req.notify()

    def _end_chunk(self) -> dict[str, Any]:
        finish = self.finish_reason()
        if self.gen.chat:
            return wire.chat_chunk(self.rid, self.created, self.model, wire.chat_delta("", False), finish)
        return wire.completion_chunk(self.rid, self.created, self.model, "", finish)

    def client_left(self) -> None:
        """The client disconnected: cancel the request (its stream wakes and stops)."""
        self.left = True
        self.server.driver.cancel(self.req)
        self.req.notify()

    async def until_done(self, receive: Receive) -> bool:
        """Wait for the request to finish; False (and cancelled) if the client disconnected."""
        done = asyncio.ensure_future(self._finished())
        gone = asyncio.ensure_future(disconnected(receive))
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


async def disconnected(receive: Receive) -> None:
    """Return once the client has gone (its request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
