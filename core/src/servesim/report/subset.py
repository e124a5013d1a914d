"""A request log narrowed to some of its requests (a warmup left out, a replay cut short).

The report is then built from the narrowed log exactly as from a whole one. The requests keep
their order and get dense ids ``0..m-1``; :func:`subset_log` also gives each kept request's
original id. Inter-token gaps are kept by their request's id, so the log must hold no gaps
shared by a run of passes (a replay with a report scope steps every pass). Run-wide counters
(``max_in_flight``, ``tokens_per_second``, ``num_preemptions``, speculative decoding) stay
those of the whole replay.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from servesim.report.stats import RequestLog


def subset_log(log: RequestLog, keep: Sequence[int], shift_ms: float = 0.0) -> RequestLog:
    """The requests ``keep`` (ascending original ids) of ``log`` as a log of their own, every
    time moved ``shift_ms`` earlier (times not yet set stay ``-1``)."""
    if len(log.shared_gap):
        raise ValueError("a log with shared run gaps cannot be narrowed to some requests")
    out = RequestLog([log.input_length[r] for r in keep],
                     record_token_times=log.token_times is not None)
    new_id = {r: i for i, r in enumerate(keep)}

    def times(col: Sequence[float]) -> list[float]:
        return [col[r] - shift_ms if col[r] >= 0.0 else col[r] for r in keep]

    out.arrival = times(log.arrival)
    out.first = times(log.first)
    out.last = times(log.last)
    out.done = times(log.done)
    out.admitted = times(log.admitted)
    for name in ("ntok", "worker", "dp_rank", "cached", "reused", "first_reused", "rejected"):
        col = getattr(log, name)
        setattr(out, name, [col[r] for r in keep])
    gaps = [(g, new_id[r]) for g, r in zip(log.itl, log.itl_rid, strict=True) if r in new_id]
    out.itl = array("d", [g for g, _ in gaps])
    out.itl_rid = array("q", [r for _, r in gaps])
    if log.token_times is not None:
        out.token_times = [[t - shift_ms for t in log.token_times[r]] for r in keep]
    if log.tier_g1 is not None and log.tier_host is not None:
        out.tier_g1 = [log.tier_g1[r] for r in keep]
        out.tier_host = [log.tier_host[r] for r in keep]
    if log.extra is not None:
        out.extra = {k: [v[r] for r in keep] for k, v in log.extra.items()}
    out.num_preemptions = log.num_preemptions
    out.max_in_flight = log.max_in_flight
    out.tokens_per_second = dict(log.tokens_per_second)
    out.spec_nextn = log.spec_nextn
    out.spec_drafts = log.spec_drafts
    out.spec_accepted = log.spec_accepted
    out.spec_per_pos = list(log.spec_per_pos)
    return out


__all__ = ["subset_log"]
