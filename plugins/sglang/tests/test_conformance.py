"""The core conformance kit against SglangRank (page 1 and page 4)."""

from __future__ import annotations

from servesim.config.engine import EngineConfig
from servesim.testing.conformance import ConformanceOptions, RankConformance, engine_maker
from servesim_sglang.config import SglangConfig
from servesim_sglang.rank import SglangRank

# SGLang counts radix-resident pages as active, so a drained rank keeps cached pages.
OPTIONS = ConformanceOptions(expect_empty_pool_after_drain=False)


class TestSglangPage1(RankConformance):
    conformance_options = OPTIONS
    make_engine = staticmethod(engine_maker(SglangRank, config=EngineConfig(backend="sglang")))


class TestSglangPage4SmallPool(RankConformance):
    conformance_options = OPTIONS
    make_engine = staticmethod(
        engine_maker(
            SglangRank,
            config=EngineConfig(backend="sglang", block_size=4, num_gpu_blocks=40),
            backend_config=SglangConfig(chunked_prefill_size=16, schedule_policy="lpm"),
        )
    )
