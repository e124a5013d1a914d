"""``TimingModel.predict_pass_ms``: the shapes each backend builds, the default pricing (the
two methods, as the backends price), pass-only models, geometry, and runs declining."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_plugins import install
from servesim.config.loader import load_config
from servesim.contract import WorkerType
from servesim.fast.engine_runs import RunEngine
from servesim.replay.runner import simulate
from servesim.timing.base import TimingModel
from servesim.timing.pricing import prices_pass_shapes
from servesim.timing.shape import PassShape, PrefillChunk

SHAPED = '''
from servesim import hookimpl
from servesim.timing.base import TimingModel
from servesim.timing.builtin import PolynomialTiming

shapes = []


class Recording(PolynomialTiming):
    """Prices through the default adapter and keeps every shape."""

    def predict_pass_ms(self, shape):
        shapes.append(shape)
        return super().predict_pass_ms(shape)


class PerToken(TimingModel):
    """Prices whole passes only: 0.01 ms per prefill token, 0.001 ms per decode context token."""

    def predict_pass_ms(self, shape):
        shapes.append(shape)
        return 0.01 * sum(c.tokens for c in shape.prefill) + 0.001 * sum(shape.decode)


@hookimpl
def servesim_register_timing_models(registry):
    registry.add("recording", Recording)
    registry.add("per_token", PerToken)
'''

BLOCKS = {"vllm": 200, "sglang": 8000, "trtllm": 200}


@pytest.fixture
def shaped(monkeypatch: pytest.MonkeyPatch) -> Any:
    return install(monkeypatch, "shaped_timing", SHAPED, dist="shaped-dist")


def _report(backend: str, timing: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    sets = [
        f"engine.backend={backend}",
        f"engine.timing_model.type={timing}",
        "workload.synthetic.num_requests=120",
        f"engine.num_gpu_blocks={BLOCKS[backend]}",
        *extra,
    ]
    report = simulate(load_config(None, sets)).report
    del report["config"]
    return report


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("split", [False, True])
def test_default_pass_pricing_is_the_backends_pricing(shaped: Any, backend: str, split: bool) -> None:
    extra = ("cluster.prefill_workers=1", "cluster.decode_workers=1") if split else ()
    plain = _report(backend, "polynomial", extra)
    assert _report(backend, "recording", extra) == plain
    assert len(shaped.shapes) > 120
    if not split:  # SGLang rounds are prefill-only or decode-only; the others mix
        assert any(s.prefill and s.decode for s in shaped.shapes) == (backend != "sglang")
    roles = {s.worker_type for s in shaped.shapes}
    assert roles == ({WorkerType.PREFILL, WorkerType.DECODE} if split else {WorkerType.AGGREGATED})
    assert {s.backend for s in shaped.shapes} == {backend}


def _one_request(tmp_path: Path, backend: str, timing: str, *sets: str) -> None:
    trace = tmp_path / "one.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}\n')
    simulate(
        load_config(
            None,
            [
                f"workload.trace.path={trace}",
                "workload.trace.trace_block_size=16",
                f"engine.backend={backend}",
                f"engine.timing_model.type={timing}",
                "engine.block_size=4",
                *sets,
            ],
        )
    )


def test_vllm_chunked_prefill_then_decode_shapes(shaped: Any, tmp_path: Path) -> None:
    # aisimulate-engine.md §6.3: a 10-token prompt with a budget of 4 prefills as (1,4,0),
    # (1,8,4), (1,10,8); after a prompt and one sampled token the decode context is prompt + 1.
    _one_request(
        tmp_path,
        "vllm",
        "recording",
        "engine.max_num_batched_tokens=4",
        "engine.num_layers=32",
        "engine.num_kv_heads=8",
        "engine.head_dim=128",
    )
    got = [(s.prefill, s.decode, s.active_kv_tokens) for s in shaped.shapes]
    assert got == [
        ((PrefillChunk(4, 0),), (), 0),
        ((PrefillChunk(4, 4),), (), 0),
        ((PrefillChunk(2, 8),), (), 0),
        ((), (11,), 11),
        ((), (12,), 12),
    ]
    first = shaped.shapes[0]
    assert (first.dp_rank, first.total_kv_tokens, first.speedup_ratio) == (0, 16384 * 4, 1.0)
    geo = first.geometry
    assert (geo.num_layers, geo.num_kv_heads, geo.head_dim, geo.block_size) == (32, 8, 128, 4)
    assert geo.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2.0


def test_sglang_and_trtllm_shapes(shaped: Any, tmp_path: Path) -> None:
    _one_request(tmp_path, "sglang", "recording")
    assert [(s.prefill, s.decode) for s in shaped.shapes] == [
        ((PrefillChunk(10, 0),), ()),
        ((), (11,)),
        ((), (12,)),
    ]
    shaped.shapes.clear()
    _one_request(tmp_path, "trtllm", "recording")
    assert [(s.prefill, s.decode) for s in shaped.shapes] == [
        ((PrefillChunk(10, 0),), ()),
        ((), (11,)),
        ((), (12,)),
    ]


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_pass_only_model_prices_every_pass_and_declines_runs(shaped: Any, backend: str) -> None:
    sets = [
        f"engine.backend={backend}",
        "engine.timing_model.type=per_token",
        "workload.synthetic.num_requests=60",
        f"engine.num_gpu_blocks={BLOCKS[backend]}",
    ]
    result = simulate(load_config(None, sets))
    assert result.report["completed"] == 60
    assert len(shaped.shapes) == result.passes  # one shape per pass: no run priced passes in bulk
    assert all(s.backend == backend for s in shaped.shapes)
    factory = load_config(None, sets).engine_factory()
    factory.engine_class = RunEngine
    engine = factory.build(0)
    assert engine.execute_run(0.0, float("inf")) is None


def test_neither_contract_is_an_abstract_class() -> None:
    class Nothing(TimingModel):
        pass

    class HalfMeans(TimingModel):
        def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
            return 1.0

    for cls in (Nothing, HalfMeans):
        with pytest.raises(TypeError, match="Can't instantiate abstract class"):
            cls()
        assert not prices_pass_shapes(cls)


def test_default_adapter_role_rules() -> None:
    from servesim.timing.builtin import FixedTiming, FixedTimingConfig
    from servesim.timing.shape import EngineGeometry

    model = FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=2.0))
    geo = EngineGeometry(None, None, None, 2.0, None, 16, 100, None, None, 1)

    def shape(role: WorkerType, chunks: tuple[PrefillChunk, ...], speedup: float = 1.0) -> PassShape:
        return PassShape("x", role, 0, geo, chunks, (5, 7), 12, 1600, speedup, 4.0)

    mixed = (PrefillChunk(4, 0), PrefillChunk(0, 8))
    assert model.predict_pass_ms(shape(WorkerType.AGGREGATED, mixed)) == 10.0 + 0.5
    assert model.predict_pass_ms(shape(WorkerType.AGGREGATED, mixed, 2.0)) == 5.0 + 0.5
    assert model.predict_pass_ms(shape(WorkerType.PREFILL, mixed)) == 10.0
    assert model.predict_pass_ms(shape(WorkerType.DECODE, mixed)) == 0.5
    # equal integer-division means: the prefill call is skipped (§6.3)
    assert (
        model.predict_pass_ms(shape(WorkerType.AGGREGATED, (PrefillChunk(1, 0), PrefillChunk(0, 0)))) == 0.5
    )
