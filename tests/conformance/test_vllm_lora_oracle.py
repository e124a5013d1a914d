"""servesim's ``vllm`` rank with LoRA against vLLM 0.32's real scheduler, step for step.

The golden step logs under ``tests/golden/vllm_lora_oracle/<scenario>/`` were recorded from the
oracle with ``--max-loras`` and a ``lora`` adapter id on trace lines
(``benchmarks/conformance/make_golden.py --lora``, scenarios in
``benchmarks/conformance/lora_scenarios.py``). Each must match with ``engine.vllm.profile:
vllm-0.32``: batch and batch order under the ``max_loras`` rule, prefix hits (which depend on
the adapter being part of every block hash), preemptions, finishes, queue lengths, free blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim_vllm.conformance import build_engine, compare_steps, golden_dirs, load_golden, run_servesim
from servesim_vllm.rank import VllmRank

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vllm_lora_oracle"
SCENARIOS = [d.name for d in golden_dirs(GOLDEN)]
PROFILE = {"profile": "vllm-0.32"}


def test_there_are_lora_scenarios_with_many_adapters_and_few_slots() -> None:
    assert len(SCENARIOS) >= 6
    for name in SCENARIOS:
        rows, opts, steps = load_golden(GOLDEN / name)
        assert opts.max_loras is not None and len(steps) >= 100, name
        adapters = {r["lora"] for r in rows if "lora" in r}
        assert len(adapters) > opts.max_loras, name  # the rule binds
        assert steps[-1]["scheduled"] == {} and steps[-1]["running"] == 0 == steps[-1]["waiting"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_lora_matches_the_oracle_step_for_step(name: str) -> None:
    rows, opts, steps = load_golden(GOLDEN / name)
    mine = run_servesim(build_engine(VllmRank, rows, opts, {**PROFILE, **opts.backend_settings()}),
                        rows, opts)
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is None, cmp.describe()
    assert cmp.identical == len(steps) == len(mine)


def _batch_adapters(rows: list[dict], step: dict) -> set[int]:
    return {rows[int(rid)].get("lora", 0) for rid in step["scheduled"]} - {0}


@pytest.mark.parametrize("name", SCENARIOS)
def test_no_step_runs_more_adapters_than_max_loras_and_some_step_is_full(name: str) -> None:
    rows, opts, steps = load_golden(GOLDEN / name)
    assert opts.max_loras is not None
    counts = [len(_batch_adapters(rows, s)) for s in steps]
    assert max(counts) == opts.max_loras


def test_without_the_rule_servesim_diverges_from_the_oracle() -> None:
    """The skip rule is what makes the steps match: with LoRA off the same trace schedules
    requests of more adapters at once, and the first step that does so differs."""
    import attrs

    rows, opts, steps = load_golden(GOLDEN / "lora_many_adapters")
    off = attrs.evolve(opts, max_loras=None)
    mine = run_servesim(build_engine(VllmRank, rows, off, PROFILE), rows, off)
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is not None
    assert max(len(_batch_adapters(rows, s)) for s in mine) > 4


def test_shared_prefixes_hit_only_within_one_adapter() -> None:
    rows, opts, steps = load_golden(GOLDEN / "lora_shared_prefix")
    meta = json.loads((GOLDEN / "lora_shared_prefix" / "options.json").read_text())
    hits = {int(rid): n for s in steps for rid, n in s["new_hits"].items()}
    assert sum(hits.values()) == meta["summary"]["prefix_hit_tokens"] > 0
    # A request that hit shares its first trace block with an earlier request of its adapter.
    for rid, n in hits.items():
        if n == 0:
            continue
        first = rows[rid]["hash_ids"][0]
        lora = rows[rid].get("lora", 0)
        assert any(r["hash_ids"][0] == first and r.get("lora", 0) == lora for r in rows[:rid])


def test_hashes_without_the_adapter_diverge_from_the_oracle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shared prefixes across adapters: were the adapter left out of block hashes, requests of
    one adapter would hit another's blocks, and the prefix hits would differ from vLLM's."""
    import servesim.kv.sequence as sequence

    monkeypatch.setattr(sequence, "adapter_root", lambda lora: None)
    rows, opts, steps = load_golden(GOLDEN / "lora_shared_prefix")
    mine = run_servesim(build_engine(VllmRank, rows, opts, PROFILE), rows, opts)
    cmp = compare_steps(steps, mine)
    assert cmp.first_divergence is not None
    assert "new_hits" in cmp.differing_fields
