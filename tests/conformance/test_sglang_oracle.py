"""servesim's ``sglang`` rank against SGLang 0.5.23's real scheduler, step for step.

The golden step logs under ``tests/golden/sglang_oracle/<scenario>/`` were recorded from the
oracle (``benchmarks/conformance/make_golden.py --engine sglang``); CI never installs SGLang.
Each trace is replayed through one ``sglang`` rank with ``engine.sglang.profile:
sglang-0.5.23``, admitting requests as the oracle did, and every pass's pass-log fields must
equal the oracle's step: mode, prefill batch and its order, decode batch and its order, prefix
hits, chunked request, retractions, finishes, queue and batch sizes, free / evictable /
protected tokens and ``new_token_ratio``. docs/conformance.md explains each switch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim_sglang.conformance import build_engine, compare_steps, load_golden, run_servesim
from servesim_sglang.rank import SglangRank

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sglang_oracle"
SCENARIOS = sorted(p.name for p in GOLDEN.iterdir() if (p / "steps.jsonl").is_file())
PROFILE = {"profile": "sglang-0.5.23"}


def _steps(name: str, settings: dict | None):
    rows, opts, steps = load_golden(GOLDEN / name)
    return steps, run_servesim(build_engine(SglangRank, opts, settings), rows, opts)


def test_at_least_eight_golden_scenarios_covering_the_issue_axes() -> None:
    assert len(SCENARIOS) >= 8
    opts = [load_golden(GOLDEN / n)[1] for n in SCENARIOS]
    assert {o.page_size for o in opts} == {1, 16}
    assert {o.schedule_policy for o in opts} == {"fcfs", "lpm", "lof"}
    assert {o.ignore_eos for o in opts} == {True, False}
    assert {o.overlap for o in opts} == {True, False}
    assert sum(o.overlap for o in opts) >= 3
    assert any(o.chunked_prefill_size <= 0 for o in opts)
    assert any(o.max_running_requests < 8 for o in opts)
    assert any(o.max_prefill_tokens < o.chunked_prefill_size for o in opts)
    retracted = [s for n in SCENARIOS for s in load_golden(GOLDEN / n)[2] if s["retracted"]]
    assert retracted, "no golden scenario retracts"
    mixed = [o for o in opts if o.enable_mixed_chunk]
    assert len(mixed) >= 3 and any(o.overlap for o in mixed) and not all(o.ignore_eos for o in mixed)


@pytest.mark.parametrize("name", SCENARIOS)
def test_sglang_0523_profile_matches_oracle_step_for_step(name: str) -> None:
    oracle, mine = _steps(name, PROFILE)
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence is None, cmp.describe()
    assert cmp.identical == len(oracle) == len(mine)


@pytest.mark.parametrize("name", ["prefix_burst_page1", "lof_policy"])
def test_reference_defaults_differ_from_sglang(name: str) -> None:
    """The defaults stay the reference's (dynamo-mocker.md §5): already the first step's
    tree accounting differs (the reference caches the first output token's KV at once)."""
    oracle, mine = _steps(name, None)
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence == 0
    assert "protected_tokens" in cmp.differing_fields


OVERLAP = [n for n in SCENARIOS if load_golden(GOLDEN / n)[1].overlap]


@pytest.mark.parametrize("name", OVERLAP)
def test_overlap_goldens_need_the_overlap_loop(name: str) -> None:
    """SGLang's overlap loop processes a prefill's result (its tree insert) one step later:
    with ``overlap_schedule`` off the profile differs from the oracle at once."""
    oracle, mine = _steps(name, {**PROFILE, "overlap_schedule": False})
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence is not None and cmp.first_divergence <= 1
    assert "protected_tokens" in cmp.differing_fields


MIXED = [n for n in SCENARIOS if load_golden(GOLDEN / n)[1].enable_mixed_chunk]


@pytest.mark.parametrize("name", MIXED)
def test_mixed_chunk_goldens_have_mixed_steps_and_need_the_option(name: str) -> None:
    """SGLang's --enable-mixed-chunk: the oracle's extend batches carry the running
    requests' decodes; without ``enable_mixed_chunk`` servesim runs them as separate passes
    and differs at the oracle's first mixed step."""
    oracle = load_golden(GOLDEN / name)[2]
    first_mixed = next(s["step"] for s in oracle if s["mode"] == "mixed")
    assert sum(s["mode"] == "mixed" for s in oracle) >= 40
    oracle, mine = _steps(name, {**PROFILE, "enable_mixed_chunk": False})
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence == first_mixed
    assert {"mode", "decode", "running_batch"} <= set(cmp.differing_fields)


def test_a_reprefilled_request_splits_at_its_prompt() -> None:
    """Without ``prompt_boundary_split`` the tree keeps a re-prefilled prompt and its
    outputs as one leaf, and 500 steps later evicts it whole where SGLang evicts the
    outputs only."""
    oracle, mine = _steps("retract_long_outputs", {**PROFILE, "prompt_boundary_split": False})
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence == 2350
    assert set(cmp.differing_fields) == {"free_tokens", "evictable_tokens"}
