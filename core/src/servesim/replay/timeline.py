"""What the replayer hands a run's figures: the pass timeline and the figure writer.

Figures are drawn by a plugin (``servesim-plot``), never by core. A replay given a
:class:`PassTimeline` (``simulate(..., timeline=...)``) hands it every forward pass's metrics
and every pressure event; ``servesim run --plot DIR`` (or ``report.plot``) asks the installed
plugins for a :class:`FigureWriter` through the ``servesim_figure_writer`` hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from servesim.contract import ForwardPassMetrics, Metrics
    from servesim.report.result import SimResult


class PassTimeline(Protocol):
    """Receives a replay's passes, in simulated-time order per rank."""

    def pass_metrics(self, worker: int | str, at_ms: float, metrics: ForwardPassMetrics,
                     occupancy: Metrics | None = None) -> None:
        """One pass's metrics at its end ``at_ms``; ``occupancy`` is the rank's snapshot after
        the pass, when the replay records one."""

    def preempted(self, worker: int, dp_rank: int, at_ms: float, count: int) -> None:
        """``count`` requests were preempted (or retracted, or paused) at ``at_ms``."""


class FigureWriter(Protocol):
    """Draws a finished run's figures (the ``servesim_figure_writer`` hook's answer)."""

    def timeline(self) -> PassTimeline:
        """A fresh collector for one run."""

    def write(self, result: SimResult, timeline: PassTimeline, folder: str) -> list[str]:
        """Draw the figures of ``result`` into ``folder``; the paths written, in order."""
