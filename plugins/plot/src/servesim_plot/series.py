"""The arrays each figure plots, computed apart from drawing so tests can pin them.

Latency samples follow the report's definitions (docs/report.md; dynamo-mocker.md §9.3):
only completed requests, ``ttft``/``e2el`` for requests with a token, ``tpot`` for those with
two, ``itl`` every pooled gap; the marked percentiles are the report's nearest-rank ones, so a
mark sits exactly at the report's ``pNN`` value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from attrs import frozen
from servesim.report.stats import nearest_rank_index, percentile_key

from servesim_plot.data import PlotData, RankPasses, RequestTable

METRICS = ("ttft", "tpot", "itl", "e2el")
MARKED = (50.0, 90.0, 99.0)
#: The report's SLA key for each metric (``report.sla``).
SLA_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2el_ms"}


@frozen
class Cdf:
    """``x`` ascending distinct values, ``y`` the fraction of samples ``<= x``; ``marks``:
    percentile → value. ``exact`` is False for a CDF known only at the report's percentiles."""

    x: np.ndarray
    y: np.ndarray
    marks: dict[float, float]
    exact: bool = True


def latency_samples(req: RequestTable) -> dict[str, tuple[np.ndarray, np.ndarray] | None]:
    """Per metric, its samples as ``(values, weights)`` (None: unknown)."""
    ok = req.completed()
    has = ok & (req.ntok >= 1)
    multi = ok & (req.ntok >= 2)
    ttft = (req.first - req.arrival)[has]
    e2e = (req.last - req.arrival)[has]
    tpot = (req.last - req.first)[multi] / (req.ntok[multi] - 1)
    ones = np.ones
    return {
        "ttft": (ttft, ones(len(ttft), dtype=np.int64)),
        "tpot": (tpot, ones(len(tpot), dtype=np.int64)),
        "itl": req.itl,
        "e2el": (e2e, ones(len(e2e), dtype=np.int64)),
    }


def weighted_cdf(values: np.ndarray, weights: np.ndarray) -> Cdf:
    """The empirical CDF of a weighted sample, with the nearest-rank percentiles marked."""
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values, dtype=np.float64)[order], np.asarray(weights, dtype=np.int64)[order]
    x, start = np.unique(v, return_index=True)
    counts = np.add.reduceat(w, start) if len(v) else np.zeros(0, dtype=np.int64)
    cum = np.cumsum(counts)
    total = int(cum[-1]) if len(cum) else 0
    marks = {}
    if total:
        for p in MARKED:
            rank = nearest_rank_index(total, p)
            marks[p] = float(x[int(np.searchsorted(cum, rank, side="right"))])
    return Cdf(x, cum / total if total else cum.astype(np.float64), marks)


def report_cdf(report: dict[str, Any], metric: str) -> Cdf | None:
    """A coarse CDF from a report's own percentiles (no per-request file at hand)."""
    points = []
    for p in report.get("percentiles", []):
        value = report.get(f"{percentile_key(p)}_{metric}_ms")
        if value is not None:
            points.append((float(value), float(p) / 100.0))
    if not points:
        return None
    points.sort()
    marks = {p: v for v, q in points for p in MARKED if abs(q * 100.0 - p) < 1e-9}
    return Cdf(np.array([v for v, _ in points]), np.array([q for _, q in points]), marks, False)


def latency_cdfs(data: PlotData) -> dict[str, Cdf | None]:
    """Per metric, the CDF drawn: exact from requests, else from the report's percentiles."""
    if data.requests is None:
        return {m: report_cdf(data.report, m) for m in METRICS}
    out: dict[str, Cdf | None] = {}
    for metric, sample in latency_samples(data.requests).items():
        out[metric] = report_cdf(data.report, metric) if sample is None else weighted_cdf(*sample)
    return out


def sla_lines(report: dict[str, Any]) -> dict[str, float]:
    """Metric → SLA threshold (ms) for the SLAs the run set."""
    sla = report.get("sla") or {}
    return {m: float(sla[k]) for m, k in SLA_KEYS.items() if sla.get(k) is not None}


@frozen
class RankTimeline:
    """One rank's timeline: pass ends and per-pass values, preemption and arrival times.
    ``kv_usage`` is the fraction of KV blocks in use after each pass, None when unknown (an
    FPM file), when ``kv_tokens`` (context tokens the batch holds) is drawn instead."""

    t_ms: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_usage: np.ndarray | None
    kv_tokens: np.ndarray
    batch_tokens: np.ndarray
    preempt_ms: np.ndarray
    arrivals_ms: np.ndarray


def rank_timeline(data: PlotData, key: tuple[str, int]) -> RankTimeline:
    """The series of rank ``key``; arrivals are the requests routed to its worker (all dp
    ranks' arrivals when the worker has several, which the figure shows once)."""
    rank: RankPasses = data.ranks[key]
    c = rank.columns
    arrivals = np.zeros(0)
    req = data.requests
    if req is not None:
        mine = (req.worker.astype(str) == key[0]) & (req.arrival >= 0)
        arrivals = np.sort(req.arrival[mine])
    usage = c["kv_usage"]
    known = usage if len(usage) and not np.isnan(usage).any() else None
    return RankTimeline(c["end_ms"], c["running"], c["waiting"], known, c["kv_tokens"],
                        c["batch_tokens"], np.sort(rank.preempt_ms), arrivals)


def worker_role(data: PlotData, worker: str) -> str | None:
    """``prefill`` or ``decode`` for a worker of a prefill/decode split (prefill workers are
    numbered first, servesim.replay.disagg), None otherwise."""
    cluster = (data.report.get("config") or {}).get("cluster") or {}
    prefill = cluster.get("prefill_workers") or 0
    if not prefill or not worker.isdigit():
        return None
    return "prefill" if int(worker) < prefill else "decode"


def workers_of(data: PlotData) -> list[str]:
    """Worker labels with a timeline, in first-seen order."""
    return list(dict.fromkeys(w for w, _dp in data.ranks))


@frozen
class TtftBreakdown:
    """Completed handed-off requests sorted by TTFT: each one's prefill (arrival to the
    source holding its KV), transfer (to the destination's activation) and first decode (to
    the first token), which sum to its TTFT."""

    prefill: np.ndarray
    transfer: np.ndarray
    decode: np.ndarray


def ttft_breakdown(req: RequestTable) -> TtftBreakdown | None:
    if req.handoff is None:
        return None
    held = req.handoff["source_held_ms"]
    active = req.handoff["destination_activated_ms"]
    ok = req.completed() & (req.ntok >= 1) & (held >= 0) & (active >= 0)
    prefill = (held - req.arrival)[ok]
    transfer = (active - held)[ok]
    decode = (req.first - active)[ok]
    order = np.argsort(prefill + transfer + decode, kind="stable")
    return TtftBreakdown(prefill[order], transfer[order], decode[order])


@frozen
class WorkerBalance:
    """Per worker (ascending id): completed requests and prefix-cache hit rate (reused over
    prompt tokens of its completed requests, as the report's ``prefix_cache_hit_rate``). In a
    prefill/decode split a request counts on its prefill and its decode worker, and the hit
    rate, which the prefill side makes, is NaN on decode workers."""

    workers: np.ndarray
    requests: np.ndarray
    hit_rate: np.ndarray


def worker_balance(req: RequestTable) -> WorkerBalance:
    ok = req.completed()
    prefill = None if req.handoff is None else req.handoff["prefill_worker"].astype(np.int64)
    workers = np.unique(req.worker[ok] if prefill is None
                        else np.concatenate((prefill[ok], req.worker[ok])))
    counts, rates = [], []
    for w in workers:
        decoded = ok & (req.worker == w)
        placed = decoded if prefill is None else ok & (prefill == w)
        prompt = int(req.input_length[placed].sum())
        counts.append(int((decoded | placed).sum()))
        if prefill is not None and not placed.any():
            rates.append(float("nan"))
        else:
            rates.append(float(req.reused[placed].sum()) / prompt if prompt else 0.0)
    return WorkerBalance(workers, np.array(counts, dtype=np.int64), np.array(rates))
