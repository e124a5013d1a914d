"""A check kit for planners (servesim.replay.planning).

``check_planner(planner_class, config=None)`` drives fresh planners as the elastic replay does
(servesim.replay.elastic: :meth:`~servesim.replay.planning.Planner.tick` with a snapshot per
tick, decisions applied at once) through a seeded load that rises threefold and falls back,
on clusters of one and of two pools, and checks:

* ``is_planner``: the class is a :class:`~servesim.replay.planning.Planner`;
* ``decisions_well_formed``: every tick returns None or a
  :class:`~servesim.replay.planning.PlannerDecision` whose targets and actions name the
  cluster's pools with integer counts (targets >= 0) and whose ``next_tick_ms``, when set,
  lies after the tick;
* ``deterministic``: two fresh planners given the same snapshots decide the same;
* ``quiet_cluster``: ticks with no traffic, no finished request and no pass (empty windows,
  zero percentiles) do not fail;
* ``finish_is_a_mapping``: :meth:`~servesim.replay.planning.Planner.finish` returns None or
  a mapping with string keys.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from servesim.replay.planning import (
    Percentiles,
    Planner,
    PlannerDecision,
    PlannerSnapshot,
    PoolSnapshot,
    TrafficWindow,
)
from servesim.testing.conformance import ConformanceReport
from servesim.testing.kit import run_checks

#: Pool shapes the kit drives: name -> initial workers.
SHAPES: tuple[dict[str, int], ...] = ({"default": 2}, {"prefill": 1, "decode": 2})
INTERVAL_S = 5.0
TICKS = 24


class _Subject:
    def __init__(self, planner_class: type, config: Any) -> None:
        self.planner_class = planner_class
        self.config = config


def _pool(name: str, ready: int, load: float, rng: random.Random, quiet: bool) -> PoolSnapshot:
    """One pool's snapshot with ``load`` requests per second spread over ``ready`` workers."""
    if quiet:
        return PoolSnapshot(name, 0, 0, ready, 0, 0, 0, 0, 0, 0.0, Percentiles(), Percentiles(),
                            0, 0.0, 0.0)
    per = load / max(ready, 1)
    ttft = 50.0 + 40.0 * per * (1.0 + rng.random() * 0.1)
    itl = 10.0 + 0.5 * per
    done = int(load * INTERVAL_S)
    return PoolSnapshot(
        name, 0, 0, ready, 0, 0, queued_requests=int(per), queued_tokens=int(per * 512),
        running_requests=int(per * 4), kv_utilization=min(per / 40.0, 1.0),
        ttft_ms=Percentiles(done, ttft, ttft * 1.5, ttft * 2.5),
        itl_ms=Percentiles(done, itl, itl * 1.2, itl * 1.6), completed=done,
        output_tokens_per_s=load * 128.0, request_throughput=load,
    )


def _drive(s: _Subject, shape: Mapping[str, int], quiet: bool = False,
           problems: list[str] | None = None) -> list[Any]:
    """Tick a fresh planner through the kit's load; decisions applied as the replay does."""
    planner = s.planner_class(s.config, dict(shape), INTERVAL_S)
    rng = random.Random(11)
    sizes = dict(shape)
    decisions: list[Any] = []
    since = 0.0
    for k in range(TICKS):
        now = k * INTERVAL_S * 1000.0
        load = 0.0 if quiet else 10.0 * (3.0 if TICKS // 3 <= k < 2 * TICKS // 3 else 1.0)
        pools = tuple(_pool(n, sizes[n], load, rng, quiet) for n in shape)
        traffic = TrafficWindow() if quiet else TrafficWindow(int(load * INTERVAL_S), 512.0, 128.0)
        decision = planner.tick(PlannerSnapshot(now, since, pools, traffic))
        since = now
        decisions.append(_key(decision))
        if problems is not None:
            problems += _malformed(decision, shape, now, k)
        if isinstance(decision, PlannerDecision):
            for name, target in decision.targets.items():
                if name in sizes and isinstance(target, int):
                    sizes[name] = max(target, 0)
            for act in decision.actions:
                if act.pool in sizes and isinstance(act.delta, int):
                    sizes[act.pool] = max(sizes[act.pool] + act.delta, 0)
    if problems is not None:
        extra = planner.finish()
        if extra is not None and not (isinstance(extra, Mapping)
                                      and all(isinstance(key, str) for key in extra)):
            problems.append(f"finish returned {extra!r}, not None or a mapping with string keys")
    return decisions


def _key(decision: Any) -> Any:
    if not isinstance(decision, PlannerDecision):
        return decision
    return (sorted(decision.targets.items()), decision.actions, decision.reason, decision.next_tick_ms)


def _malformed(decision: Any, shape: Mapping[str, int], now: float, k: int) -> list[str]:
    if decision is None:
        return []
    if not isinstance(decision, PlannerDecision):
        return [f"tick {k} returned {decision!r}, not None or a PlannerDecision"]
    out = []
    for name, target in decision.targets.items():
        if name not in shape:
            out.append(f"tick {k}: target for unknown pool {name!r}")
        if not isinstance(target, int) or isinstance(target, bool) or target < 0:
            out.append(f"tick {k}: target {target!r} for {name!r} is not an integer >= 0")
    for act in decision.actions:
        if act.pool not in shape:
            out.append(f"tick {k}: action on unknown pool {act.pool!r}")
        if not isinstance(act.delta, int) or isinstance(act.delta, bool):
            out.append(f"tick {k}: action delta {act.delta!r} is not an integer")
    nxt = decision.next_tick_ms
    if nxt is not None and not (isinstance(nxt, (int, float)) and nxt > now):
        out.append(f"tick {k} at {now} ms asked for its next tick at {nxt!r}, not after it")
    return out


def check_is_planner(s: _Subject) -> list[str]:
    ok = isinstance(s.planner_class, type) and issubclass(s.planner_class, Planner)
    return [] if ok else [f"{s.planner_class!r} is not a Planner subclass"]


def check_decisions_well_formed(s: _Subject) -> list[str]:
    problems: list[str] = []
    for shape in SHAPES:
        _drive(s, shape, problems=problems)
    return [p for p in problems if not p.startswith("finish")][:10]


def check_deterministic(s: _Subject) -> list[str]:
    return [f"pools {sorted(shape)}: two fresh planners decided differently"
            for shape in SHAPES if _drive(s, shape) != _drive(s, shape)]


def check_quiet_cluster(s: _Subject) -> list[str]:
    problems: list[str] = []
    for shape in SHAPES:
        _drive(s, shape, quiet=True, problems=problems)
    return [p for p in problems if not p.startswith("finish")][:10]


def check_finish_is_a_mapping(s: _Subject) -> list[str]:
    problems: list[str] = []
    _drive(s, SHAPES[0], problems=problems)
    return [p for p in problems if p.startswith("finish")]


PLANNER_CHECKS = {
    "is_planner": check_is_planner,
    "decisions_well_formed": check_decisions_well_formed,
    "deterministic": check_deterministic,
    "quiet_cluster": check_quiet_cluster,
    "finish_is_a_mapping": check_finish_is_a_mapping,
}
"""Every planner check by name, in the order :func:`check_planner` runs them."""


def check_planner(
    planner_class: type, config: Any = None, *, skip: Iterable[str] = (), raise_on_failure: bool = True
) -> ConformanceReport:
    """Run every planner check (minus ``skip``) on ``planner_class`` built with ``config``."""
    return run_checks(
        "planner", PLANNER_CHECKS, _Subject(planner_class, config), skip=skip,
        raise_on_failure=raise_on_failure,
    )


__all__ = ["PLANNER_CHECKS", "check_planner"]
