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
    from servesim.replay.elastic_split import ElasticSplitReplayer
    from servesim.replay.speed import SpeedOverlay


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
    if sim.faults is not None and sim.faults.kv_transfer is not None:
        raise ConfigError("KV-transfer failures need a prefill/decode split",
                          path="faults.kv_transfer", source=loaded.source)
    return replayer_class(engines, workload, pools=pools, **_elastic_parts(loaded, pools),
                          **kwargs)


def build_elastic_split(
    loaded: LoadedConfig, workload: Any, kv_sinks: list[Any], fpm_sinks: list[Any],
    record_metrics: bool, replayer_class: type[ElasticSplitReplayer] | None = None,
    emit_fpm: bool = False, speed: SpeedOverlay | None = None, **kwargs: Any
) -> ElasticSplitReplayer:
    """A prefill/decode split's pools (``prefill``, then ``decode``; their engines as
    servesim.replay.disagg builds them), routers, the planner and the fault plan, in a
    ``replayer_class`` (a live server's subclass feeds it requests as they come);
    ``emit_fpm``: forward-pass metrics even without sinks or a planner; ``speed``: the speed
    overlay that fits the pools' factories (the replay itself steps)."""
    from servesim.replay.disagg import DecodeLoadRouter, split_factories
    from servesim.replay.elastic_split import ElasticSplitReplayer
    from servesim.workload.model import mark_unique_prompts

    mark_unique_prompts(workload)
    cluster = loaded.sim.cluster
    emit_fpm = (emit_fpm or bool(fpm_sinks) or kwargs.get("timeline") is not None
                or loaded.sim.planner is not None)
    pools: list[PoolRuntime] = []
    engines: list[list[Engine]] = []
    first = 0
    for name, (factory, n) in zip(("prefill", "decode"),
                                  split_factories(loaded, kv_sinks, record_metrics, emit_fpm, speed),
                                  strict=True):
        gpus = factory.services.timing.gpus_per_rank * factory.config.dp_size
        pools.append(PoolRuntime(name, factory, gpus, n))
        engines.append([factory.build(first + w) for w in range(n)])
        first += n
    pf: Any = pools[0].factory
    df: Any = pools[1].factory
    router_class = loaded.plugins.routers().get(cluster.router)
    return (replayer_class or ElasticSplitReplayer)(
        engines[0], engines[1], workload,
        prefill_router=router_class(len(engines[0]), pf.config.dp_size, pf.config.bs,
                                    loaded.router_config),
        decode_router=DecodeLoadRouter(len(engines[1]), df.config.dp_size, df.config.bs),
        block_size=pf.config.bs, handoff_latency_ms=cluster.handoff_latency_ms,
        kv_sinks=kv_sinks, fpm_sinks=fpm_sinks, pools=pools,
        **_elastic_parts(loaded, pools), **kwargs)


def _elastic_parts(loaded: LoadedConfig, pools: list[PoolRuntime]) -> dict[str, Any]:
    """The lifecycle, the planner (with its interval) and the fault plan of ``loaded``."""
    sim = loaded.sim
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
    return {"lifecycle": sim.lifecycle, "planner": planner, "planner_interval_s": interval,
            "faults": faults}
