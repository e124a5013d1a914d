"""From a configuration with ``lifecycle:``, ``planner:`` or ``faults:`` to an
:class:`~servesim.replay.elastic.ElasticReplayer` (servesim.replay.runner calls it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servesim.engine import Engine
from servesim.errors import ConfigError
from servesim.replay.elastic import ElasticReplayer
from servesim.replay.faults import FaultPlan
from servesim.replay.lifecycle import PoolRuntime

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig
    from servesim.config.sim import SimConfig


def is_elastic(sim: SimConfig) -> bool:
    """Whether the run needs the elastic replay (any of its sections is set)."""
    return sim.lifecycle is not None or sim.planner is not None or sim.faults is not None


def build_elastic_replayer(
    loaded: LoadedConfig, workload: Any, make_factory: Callable[..., Any],
    replayer_class: type[ElasticReplayer] = ElasticReplayer, **kwargs: Any
) -> ElasticReplayer:
    """The engines of every pool (the initial workers), their factories for workers added
    later, the planner and the fault plan, in a ``replayer_class`` (a live server's
    subclass feeds it requests as they come)."""
    sim = loaded.sim
    engines: list[Engine] = []
    pools: list[PoolRuntime] = []
    specs = sim.cluster.pools or ()
    if specs:
        entries = [(p.name, p.workers, make_factory(p.engine, f"cluster.pools[{i}].engine"))
                   for i, p in enumerate(specs)]
    else:
        entries = [("default", sim.cluster.workers, make_factory())]
    for name, n, factory in entries:
        gpus = factory.services.timing.gpus_per_rank * factory.config.dp_size
        pools.append(PoolRuntime(name, factory, gpus, n))
        engines += [factory.build(len(engines) + w) for w in range(n)]
    planner = None
    interval = 10.0
    spec = loaded.planner_spec
    if spec is not None:
        try:
            planner = spec.cls(spec.config, {p.name: p.initial for p in pools}, spec.interval_s)
        except ValueError as exc:
            raise ConfigError(f"planner {spec.name!r}: {exc}", path="planner",
                              source=loaded.source) from None
        interval = spec.interval_s
    faults = FaultPlan(sim.faults) if sim.faults is not None else None
    return replayer_class(engines, workload, pools=pools, lifecycle=sim.lifecycle,
                           planner=planner, planner_interval_s=interval, faults=faults, **kwargs)
