"""SLA attainment per interval of an elastic replay: the report's ``elastic.intervals``
(docs/elastic.md, "Report").

The replay's time is cut into intervals of the planner's tick (10 s without a planner), from
0 to the replay's end. Each request belongs to the interval it arrived in. Per interval:
``arrived``, ``completed``, ``failed`` (lost, refused or rejected: every arrived request that
did not complete), ``sla_attainment`` (the share of the arrived requests that completed within
every SLA of ``report``, as the report's goodput judges them; null without SLAs or arrivals)
and ``p99_ttft_ms`` (nearest rank over the completed requests' first tokens; null without
any). A burst the cluster has not yet scaled for shows as intervals of low attainment.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from servesim.report.percentiles import percentile
from servesim.report.summary import meets_slas

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig
    from servesim.report.stats import RequestLog


def intervals(log: RequestLog, cfg: ReportConfig | None, interval_ms: float,
              end_ms: float) -> list[dict[str, Any]]:
    """The rows of ``elastic.intervals`` (module docs)."""
    count = max(1, math.ceil(end_ms / interval_ms)) if end_ms > 0 else 1
    arrived = [0] * count
    completed = [0] * count
    good = [0] * count
    ttfts: list[list[float]] = [[] for _ in range(count)]
    slas = cfg is not None and (cfg.sla_ttft_ms is not None or cfg.sla_tpot_ms is not None
                                or cfg.sla_e2e_ms is not None)
    for rid in range(log.n):
        at = log.arrival[rid]
        if at < 0.0:
            continue
        k = min(int(at // interval_ms), count - 1)
        arrived[k] += 1
        if log.done[rid] < 0.0 or log.rejected[rid]:
            continue
        completed[k] += 1
        if log.first[rid] >= 0.0:
            ttfts[k].append(log.first[rid] - at)
        if slas and meets_slas(log, rid, cfg):  # type: ignore[arg-type]
            good[k] += 1
    return [{"start_ms": k * interval_ms, "arrived": arrived[k], "completed": completed[k],
             "failed": arrived[k] - completed[k],
             "sla_attainment": good[k] / arrived[k] if slas and arrived[k] else None,
             "p99_ttft_ms": percentile(sorted(ttfts[k]), 99.0) if ttfts[k] else None}
            for k in range(count)]


__all__ = ["intervals"]
