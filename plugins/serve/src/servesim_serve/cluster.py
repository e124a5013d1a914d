"""From a validated configuration to a live driver: the engines, router and sinks ``run`` builds.

Aggregated workers: ``cluster.workers`` of ``engine:``, or the ``cluster.pools`` of a
heterogeneous cluster (each pool's engine overrides merged over ``engine:``, workers numbered
pool after pool, one router over all of them), built by the replay's own functions.

A prefill/decode split (``cluster.prefill_workers`` / ``decode_workers``) is the
disaggregated replay's own pools, routers and handoff (``build_disagg_replayer``), built as a
:class:`~servesim_serve.disagg_live.LiveDisaggReplayer` and driven by
:class:`~servesim_serve.disagg_driver.LiveDisaggDriver`; prefill workers are ``0..P-1``,
decode workers ``P..P+D-1``, as in the replay and its sinks.

With ``lifecycle:``, ``planner:`` or ``faults:`` the cluster is the elastic replay's own
(``build_elastic_replayer``), built as a :class:`~servesim_serve.elastic_live.
LiveElasticReplayer` and driven by :class:`~servesim_serve.elastic_driver.LiveElasticDriver`;
a split's is the elastic split replay's (``build_elastic_split``), built as a
:class:`~servesim_serve.elastic_split_live.LiveElasticSplitReplayer` and driven by
:class:`~servesim_serve.elastic_driver.LiveElasticSplitDriver`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from servesim.replay.cluster import build_engines
from servesim.replay.pools import build_pool_engines
from servesim.replay.runner import is_split
from servesim.sinks.base import SinkDeployment, bind_sinks, lora_deployment
from servesim.sinks.build import build_sinks

from servesim_serve.clock import SimClock
from servesim_serve.driver import LiveDriver
from servesim_serve.observer import Observer

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig


def build_cluster(loaded: LoadedConfig, speedup: float, wall: Callable[[], float],
                  observer: Observer | None = None) -> tuple[LiveDriver, list[Any]]:
    """The driver over ``loaded``'s cluster, its clock started now, and the sinks it publishes to."""
    sim = loaded.sim
    cluster = sim.cluster
    elastic = sim.is_elastic
    if is_split(loaded):  # a prefill/decode split (a ConfigError if one pool is empty)
        if elastic:
            return _build_elastic_split(loaded, SimClock(speedup, wall), observer)
        return _build_split(loaded, speedup, wall, observer)
    num_workers = serve_workers(loaded)
    router_class = loaded.plugins.routers().get(cluster.router)
    router = router_class(num_workers, sim.engine.dp_size, sim.engine.bs, loaded.router_config)
    built = build_sinks(loaded)
    kv_sinks, fpm_sinks = built["kv_events"], built["fpm"]
    _bind(loaded, num_workers, [*kv_sinks, *fpm_sinks])
    emit_fpm = bool(fpm_sinks) or bool(observer is not None and observer.wants_fpm) or sim.planner is not None

    def make_factory(overrides: Any = None, path: str = "engine overrides") -> Any:
        factory = loaded.engine_factory(overrides, emit_kv_events=bool(kv_sinks) or router.wants_kv_events,
                                        emit_forward_pass_metrics=emit_fpm, path=path)
        if any(getattr(sink, "wants_token_ids", False) for sink in kv_sinks):
            factory.config = attrs.evolve(factory.config, emit_kv_token_ids=True)
        return factory

    if elastic:
        return _build_elastic(loaded, router, make_factory, kv_sinks, fpm_sinks, SimClock(speedup, wall),
                              observer)
    spans = None
    if cluster.pools:
        engines, spans = build_pool_engines(loaded, make_factory)
    else:
        engines = build_engines(make_factory().build, cluster.workers)
    driver = LiveDriver(engines, router, SimClock(speedup, wall), block_size=sim.engine.bs,
                        kv_sinks=kv_sinks, fpm_sinks=fpm_sinks, observer=observer)
    driver.pool_spans = spans
    return driver, [*kv_sinks, *fpm_sinks]


def _build_split(loaded: LoadedConfig, speedup: float, wall: Callable[[], float],
                 observer: Observer | None) -> tuple[LiveDriver, list[Any]]:
    """The live driver of a prefill/decode split and its sinks (module docstring)."""
    from servesim.fast.overlay import FastOverlay
    from servesim.replay.disagg import build_disagg_replayer
    from servesim.workload.model import Workload

    from servesim_serve.disagg_driver import LiveDisaggDriver
    from servesim_serve.disagg_live import LiveDisaggReplayer

    built = build_sinks(loaded)
    kv_sinks, fpm_sinks = built["kv_events"], built["fpm"]
    _bind(loaded, serve_workers(loaded), [*kv_sinks, *fpm_sinks])
    replayer = build_disagg_replayer(
        loaded, Workload(()), kv_sinks, fpm_sinks, replayer_class=LiveDisaggReplayer,
        emit_fpm=bool(observer is not None and observer.wants_fpm), record_token_times=True,
        speed=FastOverlay(runs=False))  # ranks fitted to their readers; the replay steps
    assert isinstance(replayer, LiveDisaggReplayer)
    driver = LiveDisaggDriver(replayer, SimClock(speedup, wall), observer)
    return driver, [*kv_sinks, *fpm_sinks]


def _build_elastic_split(loaded: LoadedConfig, clock: SimClock,
                         observer: Observer | None) -> tuple[LiveDriver, list[Any]]:
    """The live driver of an elastic prefill/decode split and its sinks (module docstring)."""
    from servesim.fast.overlay import FastOverlay
    from servesim.replay.elastic_setup import build_elastic_split
    from servesim.workload.model import Workload

    from servesim_serve.elastic_driver import LiveElasticSplitDriver
    from servesim_serve.elastic_split_live import LiveElasticSplitReplayer

    built = build_sinks(loaded)
    kv_sinks, fpm_sinks = built["kv_events"], built["fpm"]
    _bind(loaded, serve_workers(loaded), [*kv_sinks, *fpm_sinks])
    replayer = build_elastic_split(loaded, Workload(()), kv_sinks, fpm_sinks, record_metrics=True,
                                   replayer_class=LiveElasticSplitReplayer, record_token_times=True,
                                   emit_fpm=bool(observer is not None and observer.wants_fpm),
                                   speed=FastOverlay(runs=False))
    assert isinstance(replayer, LiveElasticSplitReplayer)
    return LiveElasticSplitDriver(replayer, clock, observer), [*kv_sinks, *fpm_sinks]


def _build_elastic(loaded: LoadedConfig, router: Any, make_factory: Callable[..., Any], kv_sinks: list[Any],
                   fpm_sinks: list[Any], clock: SimClock,
                   observer: Observer | None) -> tuple[LiveDriver, list[Any]]:
    """The live driver of an elastic aggregated cluster and its sinks (module docstring)."""
    from servesim.replay.elastic_setup import build_elastic_replayer
    from servesim.workload.model import Workload

    from servesim_serve.elastic_driver import LiveElasticDriver
    from servesim_serve.elastic_live import LiveElasticReplayer

    replayer = build_elastic_replayer(loaded, Workload(()), make_factory, replayer_class=LiveElasticReplayer,
                                      router=router, block_size=loaded.sim.engine.bs, kv_sinks=kv_sinks,
                                      fpm_sinks=fpm_sinks, record_token_times=True)
    assert isinstance(replayer, LiveElasticReplayer)
    return LiveElasticDriver(replayer, clock, observer), [*kv_sinks, *fpm_sinks]


def serve_workers(loaded: LoadedConfig) -> int:
    """The workers served: a split's prefill and decode workers, else every pool's, else
    ``cluster.workers``."""
    cluster = loaded.sim.cluster
    split = cluster.prefill_workers + cluster.decode_workers
    return split or sum(p.workers for p in cluster.pools) or cluster.workers


def _bind(loaded: LoadedConfig, num_workers: int, sinks: list[Any]) -> None:
    """Tell sinks that ask for it (``bind(SinkDeployment)``, e.g. the ZMQ sinks' ports per
    worker and rank) what they serve, as the replay does."""
    sim = loaded.sim
    bind_sinks(sinks, SinkDeployment(num_workers=num_workers, dp_size=sim.engine.dp_size,
                                     block_size=sim.engine.bs, backend=sim.engine.backend,
                                     max_model_len=sim.engine.max_model_len,
                                     num_gpu_blocks=sim.engine.num_gpu_blocks,
                                     **lora_deployment(sim.engine)))
