"""The ``saturation`` planner: scale on KV-cache and queue saturation of the serving workers.

It follows the saturation analyzer of llm-d's Workload Variant Autoscaler (its
``docs/saturation-analyzer.md``; thresholds per its ``capacity-scaling-config`` defaults),
applied per pool at each tick:

1. A worker is *saturated* when its peak KV-cache use over the window is at least
   ``kv_cache_threshold`` or its peak queue length at least ``queue_length_threshold`` (the
   analyzer reads ``max_over_time`` of both over a minute; here the window is the tick
   interval).
2. Over the non-saturated workers, the spare capacity is ``kv_cache_threshold - kv`` and
   ``queue_length_threshold - queue`` per worker, averaged.
3. Scale up by one when the average spare KV is below ``kv_spare_trigger`` or the average
   spare queue below ``queue_spare_trigger`` (or every worker is saturated), unless a worker
   is still starting or warming up (the analyzer counts ready replicas only, so pending ones
   do not trigger another scale-up).
4. Scale down by one when, with the non-saturated workers' total load spread over one worker
   fewer, both spares stay at or above their triggers, and at least two workers are
   non-saturated.

Targets are the ready worker count plus or minus one; ``lifecycle.min_workers`` and
``max_workers`` bound them.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from servesim.replay.planning import Planner, PlannerDecision, PlannerSnapshot, PoolSnapshot


@frozen(kw_only=True)
class SaturationConfig:
    """Thresholds (the analyzer's defaults)."""

    kv_cache_threshold: float = 0.80
    queue_length_threshold: int = 5
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: int = 3


class SaturationPlanner(Planner):
    """See the module docs."""

    config_class = SaturationConfig

    def __init__(self, config: Any, pools: Any, interval_s: float) -> None:
        super().__init__(config or SaturationConfig(), pools, interval_s)
        self.decisions = {"up": 0, "down": 0, "hold": 0}

    def decide(self, pool: PoolSnapshot) -> tuple[int, str]:
        """``(delta, reason)`` for one pool."""
        c = self.config
        serving = [w for w in pool.workers if w.state in ("ready", "warmup")]
        if not serving:
            return 0, "no serving worker"
        free = [w for w in serving if w.peak_kv_utilization < c.kv_cache_threshold
                and w.peak_queue_length < c.queue_length_threshold]
        pending = pool.starting + pool.warmup
        if not free:
            return (0, "saturated, workers pending") if pending else (1, "every worker saturated")
        n = len(free)
        spare_kv = sum(c.kv_cache_threshold - w.peak_kv_utilization for w in free) / n
        spare_q = sum(c.queue_length_threshold - w.peak_queue_length for w in free) / n
        if spare_kv < c.kv_spare_trigger or spare_q < c.queue_spare_trigger:
            if pending:
                return 0, "low spare capacity, workers pending"
            return 1, f"spare kv {spare_kv:.2f}, spare queue {spare_q:.1f}"
        if n >= 2 and not pending:
            kv_after = sum(w.peak_kv_utilization for w in free) / (n - 1)
            q_after = sum(w.peak_queue_length for w in free) / (n - 1)
            if (c.kv_cache_threshold - kv_after >= c.kv_spare_trigger
                    and c.queue_length_threshold - q_after >= c.queue_spare_trigger):
                return -1, f"safe to remove one (kv {kv_after:.2f}, queue {q_after:.1f} after)"
        return 0, "enough spare capacity"

    def tick(self, snapshot: PlannerSnapshot) -> PlannerDecision | None:
        targets = {}
        reasons = []
        for pool in snapshot.pools:
            delta, why = self.decide(pool)
            self.decisions["up" if delta > 0 else "down" if delta < 0 else "hold"] += 1
            if delta:
                ready = sum(1 for w in pool.workers if w.state in ("ready", "warmup"))
                targets[pool.name] = max(ready + delta, 0)
                reasons.append(f"{pool.name}: {why}")
        if not targets:
            return None
        return PlannerDecision(targets=targets, reason="saturation: " + "; ".join(reasons))

    def finish(self) -> dict[str, int]:
        return dict(self.decisions)
