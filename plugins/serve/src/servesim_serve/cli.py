"""``servesim serve [CONFIG.yaml] [--host H] [--port P] [--set key=value ...]``.

Loads the configuration with the ``serve:`` section, checks every output path as ``servesim
run`` does (``servesim.cli.validate.check_outputs``; the sinks' files as the sinks are built),
binds the socket (so the bound port is known even for ``--port 0``), serves until SIGINT or
SIGTERM, then writes the report (``report.output_json``, ``report.per_request``) and prints
its table. The exit status is 0, or 1 if the simulation stopped while serving (a failing
sink, a poisoned engine), or 2 for bad input (one line, before anything is served).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from servesim.config.output_paths import write_replacing
from servesim.errors import UserError

from servesim_serve.config import ServeConfig, check_serve

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig

    from servesim_serve.app import Server

# Open streams get this long (wall seconds) to finish at shutdown; the rest are then ended
# (Server.end_open_streams), and uvicorn cancels what still runs a second later.
GRACEFUL_SHUTDOWN_S = 2


def load(config: str | None, sets: list[str], host: str | None = None,
         port: int | None = None) -> tuple[LoadedConfig, ServeConfig]:
    from servesim.config.loader import load_config

    sets = list(sets)
    if host is not None:
        sets.append(f"serve.host={json.dumps(host)}")
    if port is not None:
        if not 0 <= port <= 65535:
            raise UserError(f"--port: expected an integer in [0, 65535], got {port}")
        sets.append(f"serve.port={port}")
    loaded = load_config(config, sets, extra_sections={"serve": ServeConfig})
    cfg = loaded.extra["serve"]
    check_serve(cfg, loaded.source)
    return loaded, cfg


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def write_outputs(server: Server) -> tuple[list[tuple[str, str]], list[str]]:
    """Write the configured report files, each to a temporary name renamed into place (a
    failed write leaves an earlier file whole); returns ``(label, path)`` of each written and
    the problems of those that could not be."""
    from servesim.report.summary import dumps

    report_cfg = server.loaded.sim.report
    written = []
    problems = []
    outputs = (("report", report_cfg.output_json, lambda: dumps(server.report())),
               ("per-request records", report_cfg.per_request, lambda: "".join(server.per_request_lines())))
    for label, path, text in outputs:
        if not path:
            continue
        try:
            write_replacing(path, text())
        except UserError as exc:
            problems.append(str(exc))
            continue
        written.append((label, path))
    return written, problems


def uvicorn_config(server: Server, *, log_level: str = "warning") -> Any:
    """uvicorn's configuration for ``server``: the receipt protocol with the head limits, and
    the ``serve:`` section's keep-alive timeout and concurrency limit."""
    import uvicorn

    from servesim_serve.app import build_app
    from servesim_serve.receipt import ReceiptProtocol

    cfg = server.cfg
    return uvicorn.Config(build_app(server), log_level=log_level, lifespan="on", loop="asyncio",
                          http=ReceiptProtocol.limited(cfg.max_header_bytes, cfg.header_timeout_s),
                          access_log=False,
                          # typed int, used as a delay for loop.call_later: a float is fine
                          timeout_keep_alive=cfg.keep_alive_timeout_s,  # type: ignore[arg-type]
                          limit_concurrency=cfg.limit_concurrency,
                          timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S + 1)


def uvicorn_server(config: Any, server: Server, signals: bool = True) -> Any:
    """A uvicorn server whose shutdown ends the streams still open after
    :data:`GRACEFUL_SHUTDOWN_S` with a last chunk and ``[DONE]`` (uvicorn would cancel their
    tasks mid-body a second later); with ``signals``, it stops on SIGINT/SIGTERM without
    re-raising the signal afterwards (uvicorn re-raises it, which would end the process before
    the report is written)."""
    import asyncio

    import uvicorn

    class EndingServer(uvicorn.Server):
        async def shutdown(self, sockets: Any = None) -> None:
            loop = asyncio.get_running_loop()
            ending = loop.call_later(GRACEFUL_SHUTDOWN_S, server.end_open_streams)
            try:
                await super().shutdown(sockets)
            finally:
                ending.cancel()

    if not signals:
        return EndingServer(config)

    class ReportingServer(EndingServer):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return ReportingServer(config)


def serve_command(args: argparse.Namespace) -> int:
    from servesim.cli.validate import check_outputs
    from servesim.report.summary import format_table

    from servesim_serve.app import Server
    from servesim_serve.timeline import ENV, install

    loaded, cfg = load(args.config, args.sets, args.host, args.port)
    check_outputs(loaded)  # the report's files, as `servesim run` and `validate` check them
    server = Server(loaded, cfg)  # builds the sinks: a sink file that cannot be made fails here
    try:
        timeline = install(server)  # SERVESIM_SERVE_TIMELINE: the overhead benchmark's records
        sock = bind(cfg.host, cfg.port)
    except BaseException:
        server.stop()
        raise
    bound = sock.getsockname()[1]
    print(f"servesim serve: model {cfg.model!r} on http://{cfg.host}:{bound} "
          f"(speedup {cfg.speedup:g}); Ctrl-C writes the report", file=sys.stderr, flush=True)
    uvicorn_server(uvicorn_config(server), server).run(sockets=[sock])
    if timeline is not None:
        timeline.write(os.environ[ENV])
    written, problems = write_outputs(server)
    sys.stdout.write(format_table(server.report()))
    for label, path in written:
        sys.stdout.write(f"{label} written to {path}\n")
    if problems:
        raise UserError("; ".join(problems))
    failure = server.driver.failure
    if failure is not None:
        sys.stdout.flush()
        print(f"servesim: error: the simulation stopped while serving: {failure}", file=sys.stderr)
        return 1
    return 0
