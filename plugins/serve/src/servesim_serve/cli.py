"""``servesim serve [CONFIG.yaml] [--host H] [--port P] [--set key=value ...]``.

Loads the configuration with the ``serve:`` section, binds the socket (so the bound port is
known even for ``--port 0``), serves until SIGINT or SIGTERM (uvicorn's handlers), then writes
the report (``report.output_json``, ``report.per_request``) and prints its table.
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

from servesim.errors import UserError

from servesim_serve.config import ServeConfig, check_serve

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig

    from servesim_serve.app import Server

# Open streams get this long (wall seconds) to finish at shutdown; the rest are cancelled.
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


def write_outputs(server: Server) -> list[tuple[str, str]]:
    """Write the configured report files; returns ``(label, path)`` of each written."""
    from servesim.report.summary import dumps

    report_cfg = server.loaded.sim.report
    written = []
    outputs = (("report", report_cfg.output_json, lambda: dumps(server.report())),
               ("per-request records", report_cfg.per_request, lambda: "".join(server.per_request_lines())))
    for label, path, text in outputs:
        if not path:
            continue
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text())
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append((label, path))
    return written


def _uvicorn_server(config: Any) -> Any:
    """A uvicorn server that stops on SIGINT/SIGTERM without re-raising the signal afterwards
    (uvicorn re-raises it, which would end the process before the report is written)."""
    import uvicorn

    class ReportingServer(uvicorn.Server):
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
    import uvicorn
    from servesim.report.summary import format_table

    from servesim_serve.app import Server, build_app
    from servesim_serve.receipt import ReceiptProtocol
    from servesim_serve.timeline import ENV, install

    loaded, cfg = load(args.config, args.sets, args.host, args.port)
    server = Server(loaded, cfg)
    timeline = install(server)  # SERVESIM_SERVE_TIMELINE: the overhead benchmark's records
    sock = bind(cfg.host, cfg.port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(build_app(server), log_level="warning", lifespan="on", loop="asyncio",
                            http=ReceiptProtocol, access_log=False,
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    print(f"servesim serve: model {cfg.model!r} on http://{cfg.host}:{bound} "
          f"(speedup {cfg.speedup:g}); Ctrl-C writes the report", file=sys.stderr, flush=True)
    _uvicorn_server(config).run(sockets=[sock])
    if timeline is not None:
        timeline.write(os.environ[ENV])
    written = write_outputs(server)
    sys.stdout.write(format_table(server.report()))
    for label, path in written:
        sys.stdout.write(f"{label} written to {path}\n")
    return 0
