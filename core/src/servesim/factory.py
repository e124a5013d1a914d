"""EngineFactory: builds engines whose ranks share one timing-model instance.

aisimulate-engine.md §6.5: the serialisable config holds only a timing descriptor; the
factory is given the resolved, process-local :class:`TimingModel` and injects that one
instance into every rank of every engine it builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servesim.config.engine import EngineConfig, resolve_block_size
from servesim.engine import Engine
from servesim.kv.eviction import EvictionPolicy, LruEviction
from servesim.rank import Rank, RankIdentity, RankServices
from servesim.timing.base import TimingModel


class EngineFactory:
    """``build(worker_id)`` → an :class:`Engine` of ``config.dp_size`` ranks of ``rank_class``."""

    def __init__(
        self,
        config: EngineConfig,
        rank_class: type[Rank],
        timing: TimingModel,
        *,
        backend_config: Any = None,
        make_eviction_policy: Callable[[], EvictionPolicy] = LruEviction,
        emit_kv_events: bool = False,
        emit_forward_pass_metrics: bool = True,
        record_schedule: bool = False,
    ) -> None:
        self.rank_class = rank_class
        if backend_config is None and rank_class.config_class is not None:
            backend_config = rank_class.config_class()
        self.backend_config = backend_config
        self.config = resolve_block_size(config, rank_class.default_block_size_for(backend_config))
        self.services = RankServices(
            timing=timing,
            make_eviction_policy=make_eviction_policy,
            emit_kv_events=emit_kv_events,
            emit_forward_pass_metrics=emit_forward_pass_metrics,
            record_schedule=record_schedule,
        )

    def build_rank(self, identity: RankIdentity) -> Rank:
        return self.rank_class(identity, self.config, self.backend_config, self.services)

    def build(self, worker_id: int) -> Engine:
        return Engine.build(worker_id, self.config.dp_size, self.build_rank)
