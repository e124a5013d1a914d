"""EngineFactory: builds engines whose ranks share one timing-model instance.

aisimulate-engine.md §6.5: the serialisable config holds only a timing descriptor; the
factory is given the resolved, process-local :class:`TimingModel` and injects that one
instance into every rank of every engine it builds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from servesim.config.engine import EngineConfig, resolve_block_size
from servesim.engine import Engine
from servesim.kv.eviction import EvictionPolicy, LruEviction
from servesim.rank import Rank, RankIdentity, RankServices
from servesim.timing.base import TimingModel, scaled_ms


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
        #: Turns an exception raised while building the ranks into the error to raise instead
        #: (servesim.config.plugin_build.engine_failure: the backend's plugin named, as
        #: ``servesim validate`` names it); None raises it as it is.
        self.name_failure: Callable[[Exception], Exception] | None = None
        #: The class of the engines :meth:`build` makes (the speed overlay's
        #: ``servesim.fast.engine_runs.RunEngine`` when it fits the factory).
        self.engine_class: type[Engine] = Engine
        #: Called with each rank :meth:`build_rank` makes, before its first pass (the speed
        #: overlay tells the ranks who reads their output: servesim.fast.event_readers).
        self.rank_setup: Callable[[Rank], None] | None = None

    def fit_to_sinks(self, kv_sinks: list[Any]) -> None:
        """Token ids go in the KV events when a KV-event sink asks for them
        (``wants_token_ids``)."""
        if any(getattr(sink, "wants_token_ids", False) for sink in kv_sinks):
            self.config = attrs.evolve(self.config, emit_kv_token_ids=True)

    def build_rank(self, identity: RankIdentity) -> Rank:
        rank = self.rank_class(identity, self.config, self.backend_config, self.services)
        if self.rank_setup is not None:
            self.rank_setup(rank)
        return rank

    def build(self, worker_id: int) -> Engine:
        if self.name_failure is None:
            return self.engine_class.build(worker_id, self.config.dp_size, self.build_rank)
        try:
            return self.engine_class.build(worker_id, self.config.dp_size, self.build_rank)
        except Exception as exc:  # the backend's own code
            raise self.name_failure(exc) from exc

    def lone_prefill_ms(self, prompt_tokens: int, cached_tokens: int) -> float:
        """The timing model's price of one request's prefill of ``prompt_tokens`` tokens,
        ``cached_tokens`` of them already in KV, at this engine's ``speedup_ratio`` (as a
        pass prices its prefill: :func:`servesim.timing.base.default_pass_ms`)."""
        raw = self.services.timing.predict_prefill_ms(1, prompt_tokens, cached_tokens)
        return scaled_ms(raw, self.config.speedup_ratio)
