"""servesim's ``vllm`` rank against vLLM 0.33's scheduler: the local prefill cadence.

vLLM 0.33 applies ``prefill_schedule_interval > 1`` on an engine without data parallelism
(0.32 did only under DP). The golden step logs under ``tests/golden/vllm033_oracle/`` were
recorded from the 0.33 oracle with intervals 2 and 4 (``make_golden.py --vllm-version 0.33``);
``engine.vllm.profile: vllm-0.33`` (0.32's switches plus ``local_prefill_cadence``) must match
every step. CI never installs vLLM.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim_vllm.conformance import (
    build_engine,
    compare_steps,
    golden_dirs,
    load_golden,
    run_servesim,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vllm033_oracle"
SCENARIOS = [d.name for d in golden_dirs(GOLDEN)]
VllmRank = pytest.importorskip("servesim_vllm.rank").VllmRank


def _run(name: str, profile: str):
    rows, opts, steps = load_golden(GOLDEN / name)
    settings = {"profile": profile, **opts.backend_settings()}
    return steps, run_servesim(build_engine(VllmRank, rows, opts, settings), rows, opts)


def test_golden_set_uses_intervals_two_and_four() -> None:
    intervals = {load_golden(GOLDEN / n)[1].prefill_schedule_interval for n in SCENARIOS}
    assert intervals == {2, 4} and len(SCENARIOS) >= 8


@pytest.mark.parametrize("name", SCENARIOS)
def test_vllm_033_profile_matches_oracle_step_for_step(name: str) -> None:
    steps, mine = _run(name, "vllm-0.33")
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is None, cmp.describe()
    assert cmp.identical == len(steps) == len(mine)


@pytest.mark.parametrize("name", ["stepwise_arrivals_psi2", "single_token_outputs_psi4"])
def test_vllm_032_profile_ignores_the_interval_and_diverges(name: str) -> None:
    """0.32 applied the interval only under DP: with arrivals while requests decode, its
    schedule admits at once where 0.33 holds the prefill back."""
    steps, mine = _run(name, "vllm-0.32")
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is not None and "scheduled" in cmp.differing_fields
    assert len(cmp.servesim_line["scheduled"]) > len(cmp.oracle_line["scheduled"])
