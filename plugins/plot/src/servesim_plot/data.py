"""The data every figure is drawn from, whether it comes from a finished replay or from files.

:class:`PlotData` holds the report, one :class:`RequestTable` (per-request times, or None when
only a report is at hand) and one :class:`RankPasses` per ``(worker, dp_rank)`` (the
forward-pass timeline, or none). :func:`from_sim` builds it from a replay's log and its
:class:`~servesim_plot.timeline.TimelineRecorder`; :mod:`servesim_plot.files` builds it from a
report JSON, per-request JSONL and FPM JSONL. Workers are keyed by their label (a string):
a real engine's FPM names its worker by a connection id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from attrs import define, field

from servesim_plot.timeline import COLUMNS

if TYPE_CHECKING:
    from servesim.replay.runner import SimResult

    from servesim_plot.timeline import TimelineRecorder

#: Per-request handoff fields of a prefill/decode split: the times the TTFT breakdown reads
#: and the prefill worker (the balance figure's prefix hits happen there).
HANDOFF_KEYS = ("source_held_ms", "destination_activated_ms", "prefill_worker")


@define
class RequestTable:
    """One entry per request (``-1`` where a time did not happen). ``itl``: the pooled
    inter-token gaps of completed requests as ``(values, weights)`` (None when unknown: a
    per-request file without token times); ``handoff``: the
    prefill/decode split's times by name (:data:`HANDOFF_KEYS`), else None."""

    arrival: np.ndarray
    first: np.ndarray
    last: np.ndarray
    done: np.ndarray
    ntok: np.ndarray
    input_length: np.ndarray
    reused: np.ndarray
    worker: np.ndarray
    rejected: np.ndarray
    itl: tuple[np.ndarray, np.ndarray] | None
    handoff: dict[str, np.ndarray] | None = None

    def completed(self) -> np.ndarray:
        """Admitted and completed requests (docs/report.md, "Which requests count")."""
        return (self.done >= 0) & ~self.rejected


@define
class RankPasses:
    """One rank's passes: ``columns`` by name (servesim_plot.timeline.COLUMNS), each an
    array in pass order, and the times of its preemptions (``preempt_ms``)."""

    columns: dict[str, np.ndarray]
    preempt_ms: np.ndarray


@define
class PlotData:
    report: dict[str, Any]
    requests: RequestTable | None = None
    ranks: dict[tuple[str, int], RankPasses] = field(factory=dict)
    label: str = "run"


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def _ints(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def from_sim(result: SimResult, timeline: TimelineRecorder | None) -> PlotData:
    """A finished replay's figure data (``servesim run --plot``)."""
    from servesim.report.summary import itl_samples

    log = result.log
    extra = getattr(log, "extra", None)
    handoff = None
    if extra is not None:
        handoff = {k: _floats(extra[k]) for k in HANDOFF_KEYS}
    requests = RequestTable(
        arrival=_floats(log.arrival), first=_floats(log.first), last=_floats(log.last),
        done=_floats(log.done), ntok=_ints(log.ntok), input_length=_ints(log.input_length),
        reused=_ints(log.reused), worker=_ints(log.worker),
        rejected=np.asarray(log.rejected, dtype=bool), itl=itl_samples(log), handoff=handoff,
    )
    ranks: dict[tuple[str, int], RankPasses] = {}
    if timeline is not None:
        for (w, dp), rank in sorted(timeline.ranks.items()):
            cols = {name: np.frombuffer(rank.columns[name], dtype=np.float64).copy()
                    for name in COLUMNS}
            ranks[(str(w), dp)] = RankPasses(cols, np.frombuffer(rank.preempt_ms).copy())
    return PlotData(result.report, requests, ranks)
