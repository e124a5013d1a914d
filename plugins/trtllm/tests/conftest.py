"""Fixtures for the trtllm tests: a factory of single-rank engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from servesim.config.engine import EngineConfig
from servesim.engine import Engine
from servesim.factory import EngineFactory
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank


@pytest.fixture
def make_engine() -> Callable[..., Engine]:
    """``make_engine(policy="max_utilization", prefill_ms=10, decode_ms=2, trt={...},
    kv_events=False, record=False, **engine_keys)`` → a fresh one-rank trtllm engine with
    fixed timing (so expected times are hand-computable)."""

    def make(
        policy: str = "guaranteed_no_evict",
        *,
        prefill_ms: float = 10.0,
        decode_ms: float = 2.0,
        trt: dict[str, Any] | None = None,
        kv_events: bool = False,
        record: bool = False,
        timing: Any = None,
        **engine_keys: Any,
    ) -> Engine:
        config = EngineConfig(backend="trtllm", **engine_keys)
        backend = TrtllmConfig(capacity_scheduler_policy=CapacitySchedulerPolicy(policy), **(trt or {}))
        factory = EngineFactory(
            config,
            TrtllmRank,
            timing or FixedTiming(FixedTimingConfig(prefill_ms=prefill_ms, decode_ms=decode_ms)),
            backend_config=backend,
            emit_kv_events=kv_events,
            record_schedule=record,
        )
        return factory.build(0)

    return make
