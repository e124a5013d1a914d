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
from servesim.fast.event_readers import ALL_READ, EventReaders, FitsReaders
from servesim.kv.event_records import ROUTER_METHODS, SINK_METHODS, accepts_kv_records
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
        #: Who reads the ranks' output (servesim.fast.event_readers), set by fit_to_readers.
        self.readers: EventReaders = ALL_READ

    def fit_to_readers(self, kv_sinks: list[Any], *, router_reads_events: bool,
                       record_metrics: bool, router: Any = None, observed: bool = False) -> None:
        """Tell the ranks who reads what they emit in a replay (:class:`EventReaders`, handed
        to ranks that implement :class:`~servesim.fast.event_readers.FitsReaders`): KV events
        read by the router alone (so trace-unique blocks may be elided), KV events as compact
        records when the caller names every other reader of them, the router (``router``,
        its class or instance; None declines) with ``observed`` telling whether an observer
        plugin sees the passes' effects, and the sinks and router all accept records, and
        occupancy snapshots only when something (the timeline) reads them. Token ids go in
        the KV events when a sink asks for them."""
        router_only = router_reads_events and not kv_sinks
        records = (not router_only and router is not None and not observed and bool(kv_sinks)
                   and all(accepts_kv_records(s, SINK_METHODS) for s in kv_sinks)
                   and (not router_reads_events or accepts_kv_records(router, ROUTER_METHODS)))
        self.readers = EventReaders(kv_router_only=router_only, kv_records=records,
                                    occupancy=record_metrics)
        if any(getattr(sink, "wants_token_ids", False) for sink in kv_sinks):
            self.config = attrs.evolve(self.config, emit_kv_token_ids=True)

    def build_rank(self, identity: RankIdentity) -> Rank:
        rank = self.rank_class(identity, self.config, self.backend_config, self.services)
        if isinstance(rank, FitsReaders):
            rank.fit_readers(self.readers)
        return rank

    def build(self, worker_id: int) -> Engine:
        if self.name_failure is None:
            return Engine.build(worker_id, self.config.dp_size, self.build_rank)
        try:
            return Engine.build(worker_id, self.config.dp_size, self.build_rank)
        except Exception as exc:  # the backend's own code
            raise self.name_failure(exc) from exc

    def lone_prefill_ms(self, prompt_tokens: int, cached_tokens: int) -> float:
        """The timing model's price of one request's prefill of ``prompt_tokens`` tokens,
        ``cached_tokens`` of them already in KV, at this engine's ``speedup_ratio`` (as a
        pass prices its prefill: :func:`servesim.timing.base.default_pass_ms`)."""
        raw = self.services.timing.predict_prefill_ms(1, prompt_tokens, cached_tokens)
        return scaled_ms(raw, self.config.speedup_ratio)
