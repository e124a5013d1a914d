"""Entry-point module of servesim-calibrate: hook implementations only; machinery loads lazily."""

from __future__ import annotations

import argparse

from servesim import hookimpl


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servesim calibrate``."""
    from servesim_calibrate.command import add_arguments

    add_arguments(subparsers.add_parser("calibrate", help="fit a timing model to measured forward passes"))
