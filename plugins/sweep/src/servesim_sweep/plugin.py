"""Entry-point module of servesim-sweep: hook implementations only; machinery loads lazily."""

from __future__ import annotations

import argparse

from servesim import hookimpl


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servesim sweep``."""
    from servesim_sweep.command import add_arguments

    add_arguments(subparsers.add_parser("sweep", help="run a grid of configurations and table the best"))
