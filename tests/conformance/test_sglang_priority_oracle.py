"""servesim's ``sglang`` rank under ``engine.scheduling_policy: priority`` against SGLang 0.5.23's
real scheduler with ``--enable-priority-scheduling``, step for step.

The goldens under ``tests/golden/sglang_oracle_prio/<scenario>/`` were recorded from the oracle
through ``benchmarks/conformance/sglang_prio_trace.py`` (``make_golden.py --engine
sglang-priority``); each trace line's ``priority`` is the request's. Compared as in
``test_sglang_oracle.py``; a preemption shows in the oracle's ``retracted`` field (SGLang
releases a preempted request as it retracts one).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim_sglang.conformance import build_engine, compare_steps, load_golden, run_servesim
from servesim_sglang.rank import SglangRank

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sglang_oracle_prio"
SCENARIOS = sorted(p.name for p in GOLDEN.iterdir() if (p / "steps.jsonl").is_file())
PROFILE = {"profile": "sglang-0.5.23"}


def _steps(name: str, settings: dict | None = None):
    rows, opts, steps = load_golden(GOLDEN / name)
    return steps, run_servesim(build_engine(SglangRank, opts, {**PROFILE, **(settings or {})}), rows, opts)


def _preemptions(name: str) -> int:
    return sum(len(s["retracted"]) for s in load_golden(GOLDEN / name)[2])


def test_priority_goldens_cover_the_options() -> None:
    assert len(SCENARIOS) >= 4
    opts = {n: load_golden(GOLDEN / n)[1] for n in SCENARIOS}
    assert all(o.priority for o in opts.values())
    assert {o.schedule_policy for o in opts.values()} == {"fcfs", "lof"}
    assert {o.page_size for o in opts.values()} == {1, 16}
    assert {o.low_priority_values_first for o in opts.values()} == {True, False}
    assert {o.disable_priority_preemption for o in opts.values()} == {True, False}
    assert {o.preemption_threshold for o in opts.values()} >= {0, 5, 10}
    assert any(not o.ignore_eos for o in opts.values())
    assert _preemptions("prio_preempt_heavy") >= 30
    assert _preemptions("prio_inverted_no_preemption") == 0
    assert sum(_preemptions(n) for n in SCENARIOS) >= 50


@pytest.mark.parametrize("name", SCENARIOS)
def test_priority_matches_oracle_step_for_step(name: str) -> None:
    oracle, mine = _steps(name)
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence is None, cmp.describe()
    assert cmp.identical == len(oracle) == len(mine)


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("prio_preempt_heavy", {"disable_priority_preemption": True}),
        ("prio_preempt_slots", {"priority_scheduling_preemption_threshold": 100}),
        ("prio_inverted_no_preemption", {"schedule_low_priority_values_first": True}),
        ("prio_lof_low_first", {"schedule_low_priority_values_first": False}),
    ],
)
def test_each_option_matters(name: str, settings: dict) -> None:
    """Changing one priority option moves servesim off the oracle's schedule."""
    oracle, mine = _steps(name, settings)
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence is not None
    assert cmp.identical < len(oracle)
