"""Entry-point module of servesim-serve: hook implementations only; machinery loads lazily."""

from __future__ import annotations

import argparse

from servesim import hookimpl


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servesim serve``."""
    parser = subparsers.add_parser(
        "serve", help="serve an OpenAI-compatible API paced by the simulated engine (docs/serve.md)"
    )
    parser.add_argument("config", nargs="?", default=None, metavar="CONFIG.yaml",
                        help="YAML config (engine/cluster/report/sinks/serve); optional")
    parser.add_argument("--host", default=None, help="bind address (overrides serve.host)")
    parser.add_argument("--port", type=int, default=None, help="port (overrides serve.port)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. serve.speedup=10 (repeatable)")
    parser.set_defaults(servesim_command=_serve)


def _serve(args: argparse.Namespace) -> int:
    from servesim_serve.cli import serve_command

    return serve_command(args)
