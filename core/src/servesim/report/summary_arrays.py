"""The report's samples in numpy, for large replays (``servesim.report.stats.ARRAY_MIN``).

:func:`report_samples` returns what :func:`servesim.report.summary.list_samples` returns, from
numpy arrays: the same values, in an order that does not matter (every statistic depends only
on the multiset). Imported only for large replays, so a short one never imports numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.config.sections import ReportConfig
from servesim.report.stats import RequestLog
from servesim.report.stats_arrays import weighted_sorted_array


def _per_request_arrays(log: RequestLog, mask: np.ndarray) -> dict[str, np.ndarray]:
    arrival = np.asarray(log.arrival)[mask]
    first = np.asarray(log.first)[mask]
    last = np.asarray(log.last)[mask]
    done = np.asarray(log.done)[mask]
    ntok = np.asarray(log.ntok, dtype=np.int64)[mask]
    return {"arrival": arrival, "first": first, "last": last, "done": done, "ntok": ntok}


def gaps(log: RequestLog, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled inter-token gaps of completed requests as ``(values, weights)``, and each
    one's first gap (its time to second token), found as the first occurrence of its id in
    the individual gap log. Gaps shared by runs of passes (RequestLog.run_tokens) come with
    their weights; their requests always complete, so they need no mask.

    The individual log holds long stretches of equal gaps (the requests of one pass mostly
    emitted their previous token at the same earlier pass), so it is handed on run-length
    encoded: the statistics depend only on the multiset, and sorting the runs is far cheaper
    than sorting every gap."""
    itl = np.frombuffer(log.itl, dtype=np.float64)
    rids = np.frombuffer(log.itl_rid, dtype=np.int64)
    keep = mask[rids] if len(rids) else np.zeros(0, dtype=bool)
    itl, rids = itl[keep], rids[keep]
    ttst = itl[_first_occurrences(rids, log.n)]
    runs, lengths = _run_lengths(itl)
    values, weights = [runs], [lengths]
    shared = getattr(log, "shared_gap", None)
    if shared is not None and len(shared):
        values.append(np.frombuffer(shared, dtype=np.float64))
        weights.append(np.frombuffer(log.shared_weight, dtype=np.int64))
    return np.concatenate(values), np.concatenate(weights), ttst


def itl_samples(log: RequestLog) -> tuple[np.ndarray, np.ndarray]:
    """The pooled inter-token gaps of completed requests as ``(values, weights)``, as the
    report's ``itl`` statistics count them (for figures)."""
    values, weights, _ttst = gaps(log, log.completed_mask())
    return values, weights


def _first_occurrences(ids: np.ndarray, n: int) -> np.ndarray:
    """Index of each distinct id's first occurrence in ``ids`` (ids in ``[0, n)``), in
    ascending id order: ``np.unique(ids, return_index=True)[1]`` without sorting."""
    size = len(ids)
    first = np.full(n, size, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(size, dtype=np.int64))
    return first[first < size]


def _run_lengths(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(value, length)`` of each maximal stretch of equal consecutive values."""
    if not len(values):
        return values, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return values[starts], np.diff(np.append(starts, len(values)))


def _goodput(a: dict[str, np.ndarray], cfg: ReportConfig) -> np.ndarray:
    """Per-request SLA verdicts. A request without tokens is judged by its completion time."""
    has = a["ntok"] >= 1
    ttft = np.where(has, a["first"] - a["arrival"], a["done"] - a["arrival"])
    e2e = np.where(has, a["last"] - a["arrival"], a["done"] - a["arrival"])
    good = np.ones(len(ttft), dtype=bool)
    if cfg.sla_ttft_ms is not None:
        good &= ttft <= cfg.sla_ttft_ms
    if cfg.sla_e2e_ms is not None:
        good &= e2e <= cfg.sla_e2e_ms
    if cfg.sla_tpot_ms is not None:
        multi = a["ntok"] >= 2
        tpot = np.where(multi, (e2e - ttft) / np.maximum(a["ntok"] - 1, 1), 0.0)
        good &= ~multi | (tpot <= cfg.sla_tpot_ms)
    return good


def report_samples(log: RequestLog, cfg: ReportConfig, slas: bool) -> dict[str, Any]:
    """:func:`servesim.report.summary.list_samples` in numpy."""
    mask = log.completed_mask()
    a = _per_request_arrays(log, mask)
    completed = int(mask.sum())
    has = a["ntok"] >= 1
    multi = a["ntok"] >= 2
    itl, itl_w, ttst = gaps(log, mask)
    uniq, counts = weighted_sorted_array(itl, itl_w)
    # The reference's output_token_throughput_per_user: 1000/x is non-increasing in x > 0,
    # so the reversed positive gaps give its values in non-decreasing order without a sort.
    positive = uniq > 0
    out: dict[str, Any] = {
        "completed": completed,
        "n_in": int(np.asarray(log.input_length, dtype=np.int64)[mask].sum()),
        "n_out": int(a["ntok"].sum()),
        "duration_ms": float(a["done"].max()) if completed else 0.0,
        "reused": int(np.asarray(log.reused, dtype=np.int64)[mask].sum()),
        "first_reused": int(np.asarray([x or 0 for x in log.first_reused],
                                       dtype=np.int64)[mask].sum()),
        "ttft": (a["first"] - a["arrival"])[has],
        "tpot": ((a["last"] - a["first"])[multi]) / (a["ntok"][multi] - 1),
        "e2el": (a["last"] - a["arrival"])[has],
        "ttst": ttst,
        "itl": (uniq, counts),
        "per_user": ((1000.0 / uniq[positive])[::-1], counts[positive][::-1]),
        "good": None,
    }
    if slas:
        good = _goodput(a, cfg)
        out["good"] = (int(good.sum()), int(a["ntok"][good].sum()))
    return out


__all__ = ["gaps", "itl_samples", "report_samples"]
