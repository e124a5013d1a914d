"""The ``aic`` model prices each pass as the reference's AIC provider does (dynamo-mocker.md
§4.3; Dynamo's ``dynamo/_internal/ais.py`` ``AisSession``): prefill is one forward-pass
estimate of ``batch`` requests computing ``isl - prefix`` new tokens over ``prefix`` cached
ones, decode one estimate of ``batch`` requests at ``context + 1`` KV tokens each
(``predict_decode(batch, context, osl=2)``). The expected values come from
aiconfigurator-core's forward-pass model (``RustForwardPassPerfModel``, the estimator the
reference's session wraps), a different entry point from the ``AicEngine`` servesim uses."""

from __future__ import annotations

import math

import numpy as np
import pytest
from servesim.config.engine import EngineConfig
from servesim_aic.config import AicTimingConfig
from servesim_aic.timing import AicTiming

MODEL = "Qwen/Qwen3-32B"


@pytest.fixture(scope="module")
def reference_session():
    from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

    model = RustForwardPassPerfModel.from_native({
        "schema_version": 1, "model_name": MODEL, "system_name": "h200_sxm", "backend": "vllm",
        "backend_version": None, "tp_size": 1, "pp_size": 1,
    })

    def estimate(**scheduled: int) -> float:
        return model.estimate_forward_pass_time_ms({"scheduled_requests": scheduled})

    return estimate


@pytest.fixture(scope="module")
def timing() -> AicTiming:
    return AicTiming(AicTimingConfig(model=MODEL), EngineConfig(backend="vllm"))


@pytest.mark.parametrize(("batch", "isl", "prefix"), [(1, 1024, 0), (4, 1000, 24), (2, 1900, 900), (7, 333, 0)])
def test_prefill_is_the_reference_forward_pass(timing, reference_session, batch, isl, prefix):
    expected = reference_session(num_prefill_requests=batch, sum_prefill_tokens=batch * (isl - prefix),
                                 sum_prefill_kv_tokens=batch * prefix)
    assert timing.predict_prefill_ms(batch, isl, prefix) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("batch", "context"), [(1, 10), (8, 1500), (64, 3000), (256, 700)])
def test_decode_is_one_step_at_context_plus_one(timing, reference_session, batch, context):
    expected = reference_session(num_decode_requests=batch, sum_decode_kv_tokens=batch * (context + 1))
    got = timing.predict_decode_ms(batch, batch * context, context, 10**6)
    assert got == pytest.approx(max(1.0, expected), rel=1e-12)
    assert got > 1.0  # a 32B model on one H200 is never at the floor


def test_empty_and_fully_cached_passes_cost_nothing(timing):
    assert timing.predict_prefill_ms(0, 100, 0) == 0.0
    assert timing.predict_prefill_ms(3, 512, 512) == 0.0  # all prompt tokens cached
    assert timing.predict_decode_ms(0, 0, 0, 1000) == 0.0


def test_decode_depends_on_batch_and_context_not_pool_size(timing):
    base = timing.predict_decode_ms(16, 16 * 2000, 2000, 10**6)
    assert timing.predict_decode_ms(16, 16 * 2000, 2000, 10**4) == base
    assert timing.predict_decode_ms(32, 32 * 2000, 2000, 10**6) > base
    assert timing.predict_decode_ms(16, 16 * 8000, 8000, 10**6) > base


def test_many_equals_scalar(timing):
    kv = np.array([8 * 1000 + 8 * j for j in range(40)], dtype=np.int64)
    many = timing.predict_decode_ms_many(8, kv, 10**6)
    assert many.tolist() == [timing.predict_decode_ms(8, a, a // 8, 10**6) for a in kv.tolist()]


class _Recording:
    """Stands in for the compiled engine: records calls and returns a given latency."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.calls: list[tuple] = []

    def predict_prefill_latency(self, *args):
        self.calls.append(("prefill", *args))
        return self.value

    def predict_decode_latency(self, *args):
        self.calls.append(("decode", *args))
        return self.value


def _with_engine(value: float, *, attention_dp: int | None = None, dp_size: int = 1) -> tuple[AicTiming, _Recording]:
    t = AicTiming(AicTimingConfig(model=MODEL, attention_dp=attention_dp), EngineConfig(dp_size=dp_size))
    rec = _Recording(value)
    t._engine = rec
    return t, rec


@pytest.mark.parametrize(("value", "prefill", "decode"), [(math.nan, 0.0, 1.0), (-3.0, 0.0, 1.0), (0.25, 0.25, 1.0)])
def test_invalid_latencies_become_the_minimum(value, prefill, decode):
    t, _ = _with_engine(value)
    assert t.predict_prefill_ms(2, 100, 10) == prefill
    assert t.predict_decode_ms(2, 200, 100, 1000) == decode


def test_attention_dp_divides_a_global_batch_with_ceil():
    # One rank holding the batch of 8 attention-DP ranks (the reference's offline engine).
    t, rec = _with_engine(5.0, attention_dp=8)
    for batch, per_rank in ((128, 16), (130, 17), (4, 1)):
        t.predict_decode_ms(batch, batch * 100, 100, 10**6)
        assert rec.calls[-1] == ("decode", per_rank, 100, 2)
    t.predict_prefill_ms(130, 600, 100)
    assert rec.calls[-1] == ("prefill", 17, 600, 100)


def test_ranks_that_hold_their_own_share_are_not_divided_again():
    t, rec = _with_engine(5.0, dp_size=4)  # attention_dp defaults to engine.dp_size
    assert t.deployment.attention_dp == 4
    t.predict_decode_ms(130, 130 * 50, 50, 10**6)
    assert rec.calls[-1] == ("decode", 130, 50, 2)


def test_shapes_are_memoised():
    t, rec = _with_engine(5.0)
    for _ in range(3):
        t.predict_decode_ms(8, 800, 100, 10**6)
        t.predict_decode_ms(8, 807, 100, 10**6)  # same mean context: same shape
        t.predict_prefill_ms(2, 300, 0)
    assert rec.calls == [("decode", 8, 100, 2), ("prefill", 2, 300, 0)]
