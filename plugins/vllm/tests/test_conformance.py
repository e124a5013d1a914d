"""The core conformance kit (servesim.testing.conformance) against VllmRank."""

from __future__ import annotations

from servesim.config.engine import EngineConfig, PreemptionMode
from servesim.testing.conformance import ConformanceOptions, RankConformance, engine_maker
from servesim_vllm.rank import VllmRank


class TestVllmDefaults(RankConformance):
    make_engine = staticmethod(engine_maker(VllmRank, config=EngineConfig(block_size=16)))


class TestVllmUnderPressure(RankConformance):
    """A pool small enough to preempt, chunked prefill with a tight budget, FIFO victims."""

    conformance_options = ConformanceOptions(num_requests=10, prompt_len=40, max_output_tokens=12)
    make_engine = staticmethod(
        engine_maker(
            VllmRank,
            config=EngineConfig(block_size=8, num_gpu_blocks=14, max_num_batched_tokens=24,
                                preemption_mode=PreemptionMode.FIFO),
        )
    )


def test_pressure_config_really_preempts() -> None:
    from servesim.testing.conformance import default_workload
    from servesim.testing.driver import drive

    engine = TestVllmUnderPressure.make_engine()
    result = drive(engine, default_workload(TestVllmUnderPressure.conformance_options))
    assert engine.ranks[0].metrics().preemptions_total >= 1
    assert not any(t.rejected for t in result.requests.values())


class TestVllmAttentionDp(RankConformance):
    make_engine = staticmethod(engine_maker(VllmRank, config=EngineConfig(block_size=16, dp_size=2)))


class TestVllmNoPrefixCaching(RankConformance):
    make_engine = staticmethod(
        engine_maker(VllmRank, config=EngineConfig(block_size=16, enable_prefix_caching=False,
                                                    enable_chunked_prefill=False))
    )
