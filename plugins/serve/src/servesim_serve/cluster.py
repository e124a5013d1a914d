"""From a validated configuration to a live driver: the engines, router and sinks ``run`` builds.

Aggregated workers only: a prefill/decode split needs the disaggregated replay's handoff
machinery, which the live driver does not drive yet, so it is declined with a ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from servesim.errors import ConfigError
from servesim.replay.cluster import build_engines
from servesim.sink_build import build_sinks
from servesim.sinks import SinkDeployment, bind_sinks

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
    if cluster.prefill_workers or cluster.decode_workers:
        raise ConfigError("a prefill/decode split is not supported by servesim serve yet",
                          path="cluster.prefill_workers", source=loaded.source)
    router_class = loaded.plugins.routers().get(cluster.router)
    router = router_class(cluster.workers, sim.engine.dp_size, sim.engine.bs, loaded.router_config)
    built = build_sinks(loaded)
    kv_sinks, fpm_sinks = built["kv_events"], built["fpm"]
    _bind(loaded, [*kv_sinks, *fpm_sinks])
    factory = loaded.engine_factory(
        emit_kv_events=bool(kv_sinks) or router.wants_kv_events,
        emit_forward_pass_metrics=bool(fpm_sinks) or bool(observer is not None and observer.wants_fpm),
    )
    if any(getattr(sink, "wants_token_ids", False) for sink in kv_sinks):
        factory.config = attrs.evolve(factory.config, emit_kv_token_ids=True)
    engines = build_engines(factory.build, cluster.workers)
    driver = LiveDriver(engines, router, SimClock(speedup, wall), block_size=sim.engine.bs,
                        kv_sinks=kv_sinks, fpm_sinks=fpm_sinks, observer=observer)
    return driver, [*kv_sinks, *fpm_sinks]


def _bind(loaded: LoadedConfig, sinks: list[Any]) -> None:
    """Tell sinks that ask for it (``bind(SinkDeployment)``, e.g. the ZMQ sinks' ports per
    worker and rank) what they serve, as the replay does."""
    sim = loaded.sim
    bind_sinks(sinks, SinkDeployment(num_workers=sim.cluster.workers, dp_size=sim.engine.dp_size,
                                     block_size=sim.engine.bs, backend=sim.engine.backend,
                                     max_model_len=sim.engine.max_model_len,
                                     num_gpu_blocks=sim.engine.num_gpu_blocks))
