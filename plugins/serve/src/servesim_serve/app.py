"""The HTTP server: a Starlette app over one :class:`Server` (cluster, driver, tokenizer, metrics).

Endpoints (docs/serve.md): ``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /v1/models``, ``GET /health``, ``POST /tokenize``, ``POST /detokenize``, ``GET /metrics``,
``GET /servesim/report``. Errors use OpenAI's error shape with vLLM's types.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from servesim.errors import SimError
from servesim.sinks.base import SinkError, abandon_sinks
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from servesim_serve import wire
from servesim_serve.chunk_bytes import PieceCache, PlainTails
from servesim_serve.cluster import build_cluster
from servesim_serve.config import ServeConfig
from servesim_serve.metrics import make_observer
from servesim_serve.protocol import (
    ApiError,
    check_model,
    engine_failure,
    parse_generation,
    parse_json,
    refusal,
    served_adapters,
)
from servesim_serve.receipt import chunk_writer, received_at
from servesim_serve.records import live_per_request_lines, live_report
from servesim_serve.streams import Generation, disconnected
from servesim_serve.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig

def json_response(body: Any, status: int = 200) -> Response:
    return Response(wire.dumps(body), status_code=status, media_type="application/json")


def error_response(err: ApiError) -> Response:
    return json_response(wire.error_body(err.message, err.err_type, err.status, err.param), err.status)


def random_hex() -> str:
    """``uuid.uuid4().hex`` (vLLM's ``random_uuid``), without the UUID object: 16 random bytes
    with the version-4 and RFC 4122 variant bits set."""
    n = int.from_bytes(os.urandom(16), "big")
    n = (n & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
    return "%032x" % n


SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8")]


class BodyTooLarge(Exception):
    """The request body is larger than ``serve.max_body_bytes``."""


def too_large(limit: int) -> Response:
    """413 in the shape vLLM's ``http_exception_handler`` (``vllm/entrypoints/openai/
    api_server.py``) gives an HTTPException: the status phrase as the type; the connection is
    closed after it, the rest of the body unread."""
    body = wire.error_body(f"the request body exceeds {limit} bytes (serve.max_body_bytes)",
                           "Request Entity Too Large", 413)
    return Response(wire.dumps(body), status_code=413, media_type="application/json",
                    headers={"connection": "close"})


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(receive: Receive, scope: Scope | None = None, limit: int | None = None) -> bytes | None:
    """The request body, or None if the client left before sending all of it; BodyTooLarge
    once it is known to exceed ``limit`` (from its Content-Length, before reading any of it,
    or as it comes)."""
    if limit is not None and scope is not None:
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            raise BodyTooLarge
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class Server:
    """Everything one running server holds; simulated time 0 is its construction."""

    def __init__(self, loaded: LoadedConfig, cfg: ServeConfig,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.loaded = loaded
        self.cfg = cfg
        self.tokenizer = load_tokenizer(cfg.tokenizer)
        # The served LoRA adapters by name (engine.lora_modules; none while LoRA is off).
        self.adapters = served_adapters(loaded.sim.engine)
        self.pieces = PieceCache(self.tokenizer.piece)  # escaped output-token text
        self.plain_tails = PlainTails(self.pieces, self.tokenizer.output_pool)
        self.max_model_len = loaded.sim.engine.max_model_len
        self.observer = make_observer(cfg.model, loaded)
        # ``wall`` must be the event loop's clock (asyncio's default loop uses time.monotonic):
        # the driver sets its timers with loop.call_at at the clock's wall times.
        self.driver, self._sinks = build_cluster(loaded, cfg.speedup, wall, self.observer)
        self.observer.watch(self.driver.engines, loaded.sim.engine.bs, getattr(self.driver, "home", None))
        self.queue_full = 0
        self.created = int(time.time())
        self.open: set[Generation] = set()  # generations whose response is not complete yet

    def stop(self) -> None:
        """Stop the clock and close the sinks; a sink that cannot close (its last lines not
        written: a full disk) stops the simulation as a failing publish does."""
        self.driver.close()
        sinks, self._sinks = self._sinks, []
        if self.driver.failure is not None:  # the simulation stopped: the sinks' files are partial
            abandon_sinks(sinks)
        for sink in sinks:
            try:
                sink.close()
            except Exception as exc:
                err = exc if isinstance(exc, SimError) else SinkError(
                    f"sink {type(sink).__name__} failed to close: {exc}")
                if self.driver.failure is None:
                    self.driver.fail(err)

    def report(self) -> dict[str, Any]:
        """The report of the requests served so far (``servesim run``'s keys and more)."""
        d = self.driver
        split_report = getattr(d, "report", None)  # a prefill/decode split: the replay's report
        if split_report is not None:
            return split_report(self.loaded.sim.report, self.loaded.resolved(), queue_full=self.queue_full,
                                reasoning=self.cfg.reasoning is not None)
        return live_report(d.requests, self.loaded.sim.report, self.loaded.resolved(),
                           max_in_flight=d.max_in_flight, preemptions=d.preemptions,
                           queue_full=self.queue_full, reasoning=self.cfg.reasoning is not None,
                           pools=d.pool_spans, busy_ms=d.pass_busy_ms)

    def per_request_lines(self) -> list[str]:
        d = self.driver
        split_lines = getattr(d, "per_request_lines", None)
        if split_lines is not None:
            return split_lines()
        return live_per_request_lines(d.requests, d.max_in_flight, d.preemptions)

    # -- endpoints -----------------------------------------------------------------------

    async def generate(self, scope: Scope, receive: Receive, send: Send, chat: bool) -> None:
        """``POST /v1/completions`` (``chat`` False) and ``POST /v1/chat/completions``, as a
        plain ASGI app: a stream's chunks go straight to ``send``, with no routing, middleware
        or response object per chunk."""
        received = received_at(scope)
        try:
            body = await read_body(receive, scope, self.cfg.max_body_bytes)
        except BodyTooLarge:
            await too_large(self.cfg.max_body_bytes)(scope, receive, send)
            return
        if body is None:
            return
        admitted = self._admit(body, chat, received)
        if isinstance(admitted, Response):
            await admitted(scope, receive, send)
            return
        g = admitted
        self.open.add(g)
        try:
            if g.gen.stream:
                await self._stream(g, scope, receive, send)
                return
            await self._whole(g, scope, receive, send)
        finally:
            self.open.discard(g)

    async def _whole(self, g: Generation, scope: Scope, receive: Receive, send: Send) -> None:
        """A whole-body answer: the completion, or the error that ended the request."""
        if not await g.until_done(receive) and not g.ended_by_server:
            response = error_response(ApiError("the request was cancelled", 499, "ClientClosedRequest"))
        elif g.req.aborted:
            response = error_response(ApiError(f"the simulation stopped: {self.driver.failure}", 500,
                                               "InternalServerError"))
        elif g.req.error is not None:  # its worker failed under it (an elastic cluster)
            response = error_response(engine_failure(g.req.error))
        elif g.req.rejected:
            response = error_response(refusal(g.req))
        else:
            response = json_response(g.body())
        await response(scope, receive, send)

    def end_open_streams(self) -> None:
        """Shutdown: end every generation still open now, as vLLM ends a request its engine
        aborts: a stream's last chunk with ``finish_reason: "abort"``, then ``[DONE]``; a
        whole body with that finish reason. Each is cancelled on its engine (the report
        counts it cancelled)."""
        for g in list(self.open):
            g.end_by_server()

    def _admit(self, raw: bytes, chat: bool, received: float | None) -> Generation | Response:
        """Parse, check and submit one generation request; an error answer if it is refused.
        ``received``: the event loop's time when the request came in (its simulated arrival),
        None for now."""
        cfg = self.cfg
        try:
            body = parse_json(raw)
            lora = check_model(body, cfg.model, self.adapters)
            gen = parse_generation(body, self.tokenizer, chat=chat, default_max_tokens=cfg.default_max_tokens,
                                   max_model_len=self.max_model_len)
        except ApiError as err:
            return error_response(err)
        driver = self.driver
        if driver.failure is not None:
            return error_response(ApiError(f"the simulation stopped: {driver.failure}", 500,
                                           "InternalServerError"))
        if cfg.max_queued_requests is not None and driver.queued >= cfg.max_queued_requests:
            self.queue_full += 1
            return error_response(ApiError(
                f"The server is overloaded: {driver.queued} requests are queued "
                f"(max_queued_requests = {cfg.max_queued_requests}). Please retry later.",
                503, "ServiceUnavailableError"))
        thinking = cfg.reasoning.num_thinking_tokens(gen.max_tokens) if cfg.reasoning else 0
        arrival = driver.clock.ms_at(received) if received is not None else None
        try:
            req = driver.submit(gen.prompt, gen.max_tokens, thinking, arrival_ms=arrival, lora=lora)
        except SimError as exc:
            driver.fail(exc)
            return error_response(ApiError(f"the simulation stopped: {exc}", 500, "InternalServerError"))
        if req.rejected:
            return error_response(refusal(req))
        prefix = "chatcmpl" if chat else "cmpl"
        return Generation(self, gen, req, f"{prefix}-{random_hex()}", int(time.time()))

    async def _stream(self, g: Generation, scope: Scope, receive: Receive, send: Send) -> None:
        """The SSE response: one body message per pass; a client that leaves cancels the
        request at once, whatever the stream is waiting for: the protocol tells
        (``ChunkWriter.watch``), else a task watching ``receive``."""
        writer = chunk_writer(scope)
        gone = None
        if writer is None:
            gone = asyncio.ensure_future(disconnected(receive))
            gone.add_done_callback(lambda f: None if f.cancelled() else g.client_left())
        else:
            writer.watch(g.client_left)
        events = g.events()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            if writer is not None:  # the driver's wake-up writes the chunks (Generation.push)
                g.req.push = functools.partial(g.push, writer)
            async for data in events:
                if g.left:
                    break
                await send({"type": "http.response.body", "body": data, "more_body": not g.closed})
        finally:
            g.req.push = None
            if gone is not None:
                gone.cancel()
            else:
                writer.unwatch()  # type: ignore[union-attr]
            await events.aclose()

    async def models(self, http: Request) -> Response:
        root = self.cfg.tokenizer or self.cfg.model
        return json_response(wire.models_body(self.cfg.model, root, self.created, self.max_model_len,
                                              list(self.adapters)))

    async def health(self, http: Request) -> Response:
        """200, or 503 once the simulation has stopped (as vLLM's ``/health`` answers 503 once
        its engine is dead: ``vllm/entrypoints/serve/instrumentator/health.py``)."""
        return Response(status_code=503 if self.driver.failure is not None else 200)

    async def tokenize(self, http: Request) -> Response:
        from servesim_serve.protocol import chat_prompt, completion_prompt

        try:
            body = parse_json(await self._small_body(http))
            check_model(body, self.cfg.model, self.adapters)
            ids = chat_prompt(body, self.tokenizer) if "messages" in body else completion_prompt(
                body, self.tokenizer)
        except ApiError as err:
            return error_response(err)
        except BodyTooLarge:
            return too_large(self.cfg.max_body_bytes)
        strs = [self.tokenizer.token_text(i) for i in ids] if body.get("return_token_strs") else None
        return json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids,
                              "token_strs": strs})

    async def detokenize(self, http: Request) -> Response:
        try:
            body = parse_json(await self._small_body(http))
            check_model(body, self.cfg.model, self.adapters)
            ids = body.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
                raise ApiError("tokens must be a list of token ids", param="tokens")
        except ApiError as err:
            return error_response(err)
        except BodyTooLarge:
            return too_large(self.cfg.max_body_bytes)
        return json_response({"prompt": self.tokenizer.decode(ids)})

    async def _small_body(self, http: Request) -> bytes:
        """The body of a request to a Starlette route, within ``serve.max_body_bytes``
        (BodyTooLarge beyond it); a client that left gets an empty body (its answer goes
        nowhere)."""
        body = await read_body(http.receive, http.scope, self.cfg.max_body_bytes)
        return b"" if body is None else body

    async def metrics(self, http: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(self.observer.render(), media_type=CONTENT_TYPE_LATEST)

    async def report_endpoint(self, http: Request) -> Response:
        return json_response(self.report())


def build_app(server: Server) -> App:
    """The ASGI app; the server's cluster starts with the app and stops with it."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            server.stop()

    async def served_by_app(http: Request) -> Response:  # App answers these POSTs itself
        raise AssertionError("unreachable")

    routes = [
        Route("/v1/completions", served_by_app, methods=["POST"]),  # other methods: 405
        Route("/v1/chat/completions", served_by_app, methods=["POST"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/health", server.health, methods=["GET"]),
        Route("/tokenize", server.tokenize, methods=["POST"]),
        Route("/detokenize", server.detokenize, methods=["POST"]),
        Route("/metrics", server.metrics, methods=["GET"]),
        Route("/servesim/report", server.report_endpoint, methods=["GET"]),
    ]
    return App(server, Starlette(routes=routes, lifespan=lifespan))


GENERATION = {"/v1/completions": False, "/v1/chat/completions": True}


class App:
    """The server's ASGI app: generation requests go to :meth:`Server.generate` directly,
    everything else (lifespan included) to the Starlette app."""

    def __init__(self, server: Server, rest: Starlette) -> None:
        self.server = server
        self.rest = rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            chat = GENERATION.get(scope["path"])
            if chat is not None:
                await self.server.generate(scope, receive, send, chat)
                return
        await self.rest(scope, receive, send)
