"""Entry-point module of servesim-plot: hook implementations only; machinery loads lazily."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.replay.runner import SimResult

    from servesim_plot.timeline import TimelineRecorder


class Figures:
    """The figures of ``servesim run --plot DIR`` (the ``servesim_figure_writer`` answer)."""

    def timeline(self) -> TimelineRecorder:
        from servesim_plot.timeline import TimelineRecorder

        return TimelineRecorder()

    def write(self, result: SimResult, timeline: TimelineRecorder, folder: str) -> list[str]:
        from servesim_plot.data import from_sim
        from servesim_plot.draw import write_figures

        return write_figures(from_sim(result, timeline), folder)


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servesim plot``."""
    from servesim_plot.command import add_arguments

    add_arguments(subparsers.add_parser("plot", help="draw a run's figures from its saved files"))


@hookimpl
def servesim_figure_writer() -> Figures:
    return Figures()
