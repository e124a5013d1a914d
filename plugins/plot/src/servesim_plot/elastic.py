"""The series of the elastic figure (``elastic.png``): workers per pool by state over simulated
time, against the offered load and the p99 TTFT, for a report of an elastic replay
(docs/elastic.md).

The worker counts come from the report alone: each worker of ``elastic.workers`` lists its
``states`` as ``[t_ms, state]`` at its addition and at every change since. The load and TTFT
need the per-request times (a replay's log, or a per-request file): arrivals per second over
each interval, and the p99 TTFT (nearest rank, as the report's) of the completed requests that
arrived in it. Intervals are the smallest of 1, 2 or 5 times a power of ten milliseconds that
cuts the replay into at most :data:`MAX_INTERVALS`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from attrs import frozen
from servesim.report.percentiles import percentile

from servesim_plot.data import PlotData

#: The states a worker holds GPUs in, bottom to top in the figure (``stopped`` is left out).
STATES = ("ready", "warmup", "starting", "draining", "restarting")
MAX_INTERVALS = 40


@frozen
class PoolWorkers:
    """One pool's workers over time: ``counts[state][i]`` workers are in ``state`` from
    ``t_ms[i]`` until ``t_ms[i + 1]`` (the last until the replay's end)."""

    name: str
    t_ms: np.ndarray
    counts: dict[str, np.ndarray]


@frozen
class ElasticSeries:
    """Every series of the figure. ``starts_ms``: the intervals' starts; ``arrivals_per_s``
    and ``p99_ttft_ms`` (NaN where no completed request arrived) per interval, None without
    per-request times; ``sla_ttft_ms``: the run's TTFT SLA, if set."""

    pools: list[PoolWorkers]
    end_ms: float
    interval_ms: float
    starts_ms: np.ndarray
    arrivals_per_s: np.ndarray | None
    p99_ttft_ms: np.ndarray | None
    sla_ttft_ms: float | None


def interval_ms(span_ms: float) -> float:
    """The interval for a replay of ``span_ms`` (see the module docs)."""
    want = max(span_ms, 1.0) / MAX_INTERVALS
    power = 10.0 ** math.floor(math.log10(want))
    return next(step * power for step in (1.0, 2.0, 5.0, 10.0) if step * power >= want)


def pool_workers(report: dict[str, Any], pool: str) -> PoolWorkers:
    """The counts by state of ``pool``'s workers at each time one of them changes state."""
    changes: dict[float, dict[str, int]] = {0.0: dict.fromkeys(STATES, 0)}
    for worker in report["elastic"]["workers"]:
        if worker["pool"] != pool:
            continue
        before = None
        for t, state in worker["states"]:
            delta = changes.setdefault(float(t), dict.fromkeys(STATES, 0))
            if before in delta:
                delta[before] -= 1
            if state in delta:
                delta[state] += 1
            before = state
    times = sorted(changes)
    running = np.cumsum([[changes[t][s] for s in STATES] for t in times], axis=0)
    return PoolWorkers(pool, np.array(times), {s: running[:, i] for i, s in enumerate(STATES)})


def usable(elastic: Any) -> bool:
    """Whether an ``elastic`` section has what the figure reads, with the report's types:
    ``pools`` with a ``name``, ``workers`` with a ``pool`` and ``states`` (``[t_ms, state]``
    pairs)."""
    try:
        names = {p["name"] for p in elastic["pools"]}
        return all(w["pool"] in names and all(
            isinstance(t, int | float) and not isinstance(t, bool) and isinstance(state, str)
            for t, state in w.get("states", ())) for w in elastic["workers"])
    except (KeyError, TypeError, ValueError):
        return False


def elastic_series(data: PlotData) -> ElasticSeries | None:
    """The figure's series, or None for a report without an ``elastic`` section (or one from
    a servesim whose report lists no worker ``states``)."""
    report = data.report
    elastic = report.get("elastic")
    if not isinstance(elastic, dict) or not all("states" in w for w in elastic.get("workers", ())):
        return None
    pools = [pool_workers(report, p["name"]) for p in elastic["pools"]]
    # the replay's end: its last completion (the report's duration_ms), or a later change
    end = max([float(report.get("duration_ms") or 0.0),
               *(float(t) for w in elastic["workers"] for t, _ in w["states"])])
    req = data.requests
    if req is not None and len(req.arrival):
        end = max(end, float(req.done.max()), float(req.arrival.max()))
    step = interval_ms(end)
    count = max(1, math.ceil(end / step)) if end > 0 else 1
    starts = np.arange(count) * step
    arrivals = p99 = None
    if req is not None:
        seen = req.arrival >= 0
        bins = np.minimum((req.arrival[seen] // step).astype(np.int64), count - 1)
        arrivals = np.bincount(bins, minlength=count) / (step / 1000.0)
        ok = req.completed() & (req.ntok >= 1)
        ttft = (req.first - req.arrival)[ok]
        of = np.minimum((req.arrival[ok] // step).astype(np.int64), count - 1)
        p99 = np.array([percentile(np.sort(ttft[of == i]), 99.0) if (of == i).any() else math.nan
                        for i in range(count)])
    sla = (report.get("sla") or {}).get("ttft_ms")
    return ElasticSeries(pools, end, step, starts, arrivals, p99, None if sla is None else float(sla))
