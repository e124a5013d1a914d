"""The ``engine.vllm:`` vLLM-version behaviour settings (issue 9 item 2, docs/conformance.md).

Each switch is pinned on a hand-sized case where it changes the schedule; the golden oracle
test (test_vllm_oracle.py) pins them all against vLLM 0.32 itself.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from servesim.contract import Request
from servesim.testing.driver import drive
from servesim.tokens import Tokens
from servesim_vllm.conformance import OracleOptions, build_engine, run_servesim

rank_mod = pytest.importorskip("servesim_vllm.rank")
VllmRank = rank_mod.VllmRank
if "profile" not in attrs.fields_dict(VllmRank.config_class):
    pytest.skip("engine.vllm has no behaviour settings yet", allow_module_level=True)
behaviour = pytest.importorskip("servesim_vllm.behaviour")

V032 = {"profile": "vllm-0.32"}


def _rows(*lengths: tuple[int, int]) -> list[dict[str, Any]]:
    # Distinct hash ids per request: no prefix sharing.
    return [{"timestamp": i, "input_length": isl, "output_length": osl,
             "hash_ids": [1000 * (i + 1) + k for k in range(-(-isl // 16))]}
            for i, (isl, osl) in enumerate(lengths)]


def _steps(rows: list[dict[str, Any]], opts: OracleOptions, settings: dict[str, Any] | None = None):
    return run_servesim(build_engine(VllmRank, rows, opts, settings), rows, opts)


def test_profiles_resolve_and_explicit_keys_override() -> None:
    cfg = VllmRank.config_class
    ref = behaviour.resolve(cfg())
    assert ref == behaviour.PROFILES["reference"]
    assert (ref.null_block, ref.trailing_empty_step, ref.unchunked_gate_counts_outputs) == (False,) * 3
    assert ref.scheduler_reserve_full_isl is True
    v = behaviour.resolve(cfg(profile="vllm-0.32"))
    assert v.null_block and v.trailing_empty_step and v.unchunked_gate_counts_outputs
    mixed = behaviour.resolve(cfg(profile="vllm-0.32", null_block=False, scheduler_reserve_full_isl=False))
    assert not mixed.null_block and mixed.trailing_empty_step and not mixed.scheduler_reserve_full_isl


def test_unknown_profile_is_reported_with_its_key_path() -> None:
    from servesim.config.engine import EngineConfig

    problems = VllmRank.validate_config(EngineConfig(), VllmRank.config_class(profile="vllm-9"))
    assert problems == [("engine.vllm.profile",
                         "unknown profile 'vllm-9'; expected one of reference, vllm-0.32, vllm-0.33")]


def test_null_block_leaves_one_block_fewer() -> None:
    opts = OracleOptions(num_gpu_blocks=10, max_num_batched_tokens=512)
    rows = _rows((32, 2))
    assert _steps(rows, opts)[0]["free_blocks"] == 8  # 10 - 2 for the prompt
    assert _steps(rows, opts, {"null_block": True})[0]["free_blocks"] == 7


def test_null_block_makes_a_pool_sized_prompt_too_large() -> None:
    opts = OracleOptions(num_gpu_blocks=10, max_num_batched_tokens=512)
    rows = _rows((159, 1))  # 10 blocks: exactly the pool
    ref = _steps(rows, opts)
    assert ref[0]["scheduled"] == {"0": 159} and ref[0]["finished"] == ["0"]
    engine = build_engine(VllmRank, rows, opts, {"null_block": True})
    req = Request(request_id=0, prompt=Tokens(list(range(3, 162))), max_output_tokens=1)
    result = drive(engine, [(0.0, req)])
    assert result.requests[0].rejected and result.requests[0].token_times == []


def test_trailing_empty_step_follows_the_last_finish_only() -> None:
    opts = OracleOptions(num_gpu_blocks=50, max_num_batched_tokens=512, admit="stepwise", per_step=1)
    rows = _rows((20, 1), (20, 3))
    ref = _steps(rows, opts)
    v = _steps(rows, opts, V032)
    assert [s["scheduled"] for s in ref] == [{"0": 20}, {"1": 20}, {"1": 1}, {"1": 1}]
    # Request 0 finishes at step 0 but request 1 arrives before step 1: no empty step there.
    assert [s["scheduled"] for s in v] == [{"0": 20}, {"1": 20}, {"1": 1}, {"1": 1}, {}]
    assert v[-1] == {"step": 4, "admitted": [], "scheduled": {}, "new_hits": {}, "resumed": {},
                     "preempted": [], "finished": [], "running": 0, "waiting": 0,
                     "free_blocks": 49}


def test_trailing_empty_step_takes_no_time_and_changes_no_output() -> None:
    req = Request(request_id=0, prompt=Tokens(list(range(3, 40))), max_output_tokens=4)
    results = []
    for settings in (None, V032):
        engine = build_engine(VllmRank, _rows((37, 4)), OracleOptions(num_gpu_blocks=50), settings)
        results.append(drive(engine, [(0.0, req)]))
    ref, v = results
    assert len(v.passes) == len(ref.passes) + 1
    assert v.passes[-1].end_ms == v.passes[-1].started_at_ms == ref.end_ms
    assert v.requests[0].token_times == ref.requests[0].token_times
    assert v.end_ms == ref.end_ms


def test_reserve_full_isl_off_admits_when_only_the_first_chunk_fits() -> None:
    # 8 blocks; request 0 takes 4. Request 1 needs 5 blocks for its whole prompt but its first
    # chunk (the 32 tokens left in the budget) needs only 2.
    opts = OracleOptions(num_gpu_blocks=8, max_num_batched_tokens=96)
    rows = _rows((64, 30), (80, 5))
    assert _steps(rows, opts)[0]["scheduled"] == {"0": 64}
    off = _steps(rows, opts, {"scheduler_reserve_full_isl": False})
    assert off[0]["scheduled"] == {"0": 64, "1": 32}
    assert off[0]["free_blocks"] == 2



def test_vllm_033_profile_is_032_plus_the_local_prefill_cadence() -> None:
    v32, v33 = behaviour.PROFILES["vllm-0.32"], behaviour.PROFILES["vllm-0.33"]
    assert not v32.local_prefill_cadence and v33.local_prefill_cadence
    assert attrs.evolve(v33, local_prefill_cadence=False) == v32
    cfg = VllmRank.config_class
    assert not behaviour.resolve(cfg(profile="vllm-0.33", local_prefill_cadence=False)).local_prefill_cadence
