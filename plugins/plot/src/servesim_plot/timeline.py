"""What a replay keeps for its timeline figures: per pass and per rank, the forward-pass shape.

The replayer hands every forward pass's :class:`~servesim.contract.ForwardPassMetrics` and
every pressure event (preemption, retraction, pause) here, with the pass end or the pass start
as its time, only when figures are asked for. Runs of passes report the metrics of each of
their passes with that pass's own end (servesim.fast.replay_runs), so stepping and runs give the
same series. Values go into flat ``array`` columns keyed by ``(worker, dp_rank)``: a few
appends per pass, no object kept.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.contract import ForwardPassMetrics, Metrics

NAN = float("nan")

#: The per-pass columns, in the order :meth:`TimelineRecorder.pass_metrics` appends them.
COLUMNS = ("end_ms", "duration_ms", "running", "waiting", "batch_tokens", "kv_tokens",
           "queued_decode", "kv_usage")


class RankColumns:
    """One rank's passes as columns (see :data:`COLUMNS`) and its preemption times."""

    __slots__ = ("columns", "preempt_ms")

    def __init__(self) -> None:
        self.columns = {name: array("d") for name in COLUMNS}
        self.preempt_ms = array("d")  # one entry per pressure event


def fpm_row(m: ForwardPassMetrics) -> tuple[float, float, float, float, float, float]:
    """``(duration, running, waiting, batch tokens, KV tokens, queued decode)`` of one pass.

    Running are the scheduled requests; waiting are the queued ones (new prompts and
    preempted requests); a decode request computes one token; KV tokens are every context
    token the pass holds: prefix hits and earlier chunks, this pass's prefill tokens and the
    decode requests' contexts (ecosystem.md §5)."""
    return (
        m.duration_ms,
        m.num_prefill_requests + m.num_decode_requests,
        m.num_queued_prefill + m.num_queued_decode,
        m.sum_prefill_tokens + m.num_decode_requests,
        m.sum_prefill_kv_tokens + m.sum_prefill_tokens + m.sum_decode_kv_tokens,
        m.num_queued_decode,
    )


class TimelineRecorder:
    """The replayer's hook for timeline data (``Replayer(timeline=...)``)."""

    def __init__(self) -> None:
        self.ranks: dict[tuple[int | str, int], RankColumns] = {}

    def _rank(self, worker: int | str, dp_rank: int) -> RankColumns:
        key = (worker, dp_rank)
        rank = self.ranks.get(key)
        if rank is None:
            rank = self.ranks[key] = RankColumns()
        return rank

    def pass_metrics(self, worker: int | str, at_ms: float, metrics: ForwardPassMetrics,
                     occupancy: Metrics | None = None) -> None:
        """One pass's metrics; ``occupancy`` (the rank's snapshot after the pass) gives the
        fraction of KV blocks in use, NaN without it (an FPM file)."""
        cols = self._rank(worker, metrics.dp_rank).columns
        cols["end_ms"].append(at_ms)
        for name, value in zip(COLUMNS[1:-1], fpm_row(metrics), strict=True):
            cols[name].append(value)
        cols["kv_usage"].append(NAN if occupancy is None else occupancy.cache_usage)

    def preempted(self, worker: int, dp_rank: int, at_ms: float, count: int) -> None:
        self._rank(worker, dp_rank).preempt_ms.extend([at_ms] * count)
