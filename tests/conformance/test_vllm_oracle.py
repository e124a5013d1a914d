"""servesim's ``vllm`` rank against vLLM 0.32's real scheduler, step for step (issue 9 item 4).

The golden step logs under ``tests/golden/vllm_oracle/<scenario>/`` were recorded from the oracle
(``benchmarks/conformance/make_golden.py``); CI never installs vLLM. Each scenario's trace is
replayed through one ``vllm`` rank with ``engine.vllm.profile: vllm-0.32``, admitting requests
as the oracle did, and every pass's ``ScheduleRecord`` must equal the oracle's step: batch and
batch order, prefix hits of first admissions and readmissions, preemptions, finishes, queue
lengths and free blocks. docs/conformance.md explains each difference the profile switches.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from servesim_vllm.conformance import (
    build_engine,
    compare_steps,
    golden_dirs,
    load_golden,
    run_servesim,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vllm_oracle"
SCENARIOS = [d.name for d in golden_dirs(GOLDEN)]
PROFILE = {"profile": "vllm-0.32"}

rank_mod = pytest.importorskip("servesim_vllm.rank")
VllmRank = rank_mod.VllmRank


def _has_profile() -> bool:
    cls = VllmRank.config_class
    return cls is not None and attrs.has(cls) and "profile" in attrs.fields_dict(cls)


def test_there_are_at_least_eight_golden_scenarios_of_a_few_hundred_steps() -> None:
    assert len(SCENARIOS) >= 8
    for name in SCENARIOS:
        _rows, _opts, steps = load_golden(GOLDEN / name)
        assert len(steps) >= 100, name
        # The oracle's run ends with vLLM's empty schedule() after the last finish.
        assert steps[-1]["scheduled"] == {} and steps[-1]["running"] == 0 == steps[-1]["waiting"]


@pytest.mark.skipif(not _has_profile(), reason="engine.vllm has no 'profile' setting yet")
@pytest.mark.parametrize("name", SCENARIOS)
def test_vllm_032_profile_matches_oracle_step_for_step(name: str) -> None:
    rows, opts, steps = load_golden(GOLDEN / name)
    settings = {**PROFILE, **opts.backend_settings()}
    mine = run_servesim(build_engine(VllmRank, rows, opts, settings), rows, opts)
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is None, cmp.describe()
    assert cmp.identical == len(steps) == len(mine)


@pytest.mark.parametrize("name", SCENARIOS)
def test_reference_defaults_differ_first_by_the_null_block(name: str) -> None:
    """Defaults stay the reference's (dynamo-mocker.md §2.2): all ``num_gpu_blocks`` are usable,
    so the first step already reports one free block more than vLLM, which keeps one block as
    its null block (with a tight pool that extra block changes later schedules too)."""
    rows, opts, steps = load_golden(GOLDEN / name)
    mine = run_servesim(build_engine(VllmRank, rows, opts), rows, opts)
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence == 0 and cmp.differing_fields == ["free_blocks"]
    assert cmp.servesim_line is not None and cmp.oracle_line is not None
    assert cmp.servesim_line["free_blocks"] == cmp.oracle_line["free_blocks"] + 1
    # The reference has no empty pass after the last finish.
    assert mine[-1]["scheduled"] != {}
