"""``engine.sglang`` version switches and ``profile`` (servesim_sglang.behaviour)."""

from __future__ import annotations

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request, Submit
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.timing.builtin import FixedTiming
from servesim.tokens import Tokens
from servesim_sglang.behaviour import PROFILES, SWITCHES, resolve
from servesim_sglang.config import SglangConfig
from servesim_sglang.rank import SglangRank


def test_reference_profile_is_the_default_and_every_switch_is_off() -> None:
    b = resolve(SglangConfig())
    assert b == PROFILES["reference"] and not any(getattr(b, n) for n in SWITCHES)
    assert b.runs_supported


def test_sglang_profile_sets_every_switch_and_a_key_overrides_it() -> None:
    b = resolve(SglangConfig(profile="sglang-0.5.23"))
    assert all(getattr(b, n) for n in SWITCHES) and not b.runs_supported
    one = resolve(SglangConfig(profile="sglang-0.5.23", evict_whole_leaves=False))
    assert not one.evict_whole_leaves and one.lazy_decode_slot


def test_unknown_profile_names_the_key() -> None:
    problems = SglangRank.validate_config(EngineConfig(backend="sglang"), SglangConfig(profile="sglang-9"))
    assert problems == [("engine.sglang.profile",
                         "unknown profile 'sglang-9'; expected one of reference, sglang-0.5.23")]


def _engine(sg: SglangConfig):
    factory = EngineFactory(EngineConfig(backend="sglang", num_gpu_blocks=400), SglangRank,
                            FixedTiming(), backend_config=sg)
    factory.engine_class = RunEngine
    engine = factory.build(0)
    for i in range(3):
        engine.apply(0, Submit(Request(i, Tokens([i * 1000 + t for t in range(20)]), 30)), 0.0)
    started = engine.execute_pass(0.0)
    engine.complete_pass(started.pass_id, started.end_ms)
    return engine, started.end_ms


@pytest.mark.parametrize("switch", SWITCHES)
def test_any_switch_declines_runs(switch: str) -> None:
    """A steady decode batch runs under the reference; any SGLang switch makes it step."""
    engine, now = _engine(SglangConfig())
    assert engine.execute_run(now, now + 1e9, 50) is not None
    engine, now = _engine(SglangConfig(**{switch: True}))
    assert engine.execute_run(now, now + 1e9, 50) is None


def test_lazy_decode_slot_holds_prompt_plus_outputs_minus_one() -> None:
    """After the prefill (first token out) each request holds its 20 prompt slots only; the
    reference has already taken the first token's slot."""
    free = {}
    for lazy in (False, True):
        engine, _ = _engine(SglangConfig(lazy_decode_slot=lazy))
        free[lazy] = engine.ranks[0].cache.free_pages
    assert free == {False: 400 - 63, True: 400 - 60}
