"""servesim's ``sglang`` rank under ``engine.scheduling_policy: priority`` against SGLang 0.5.23's
real scheduler with ``--enable-priority-scheduling``, step for step.

The goldens under ``tests/golden/sglang_oracle_prio/<scenario>/`` were recorded from the oracle
through ``benchmarks/conformance/sglang_prio_trace.py`` (``make_golden.py --engine
sglang-priority``); each trace line's ``priority`` is the request's. Compared as in
``test_sglang_oracle.py``; a preemption shows in the oracle's ``retracted`` field (SGLang
releases a preempted request as it retracts one). The ``prio_overlap_*`` goldens run SGLang's
overlap loop (``--overlap``), where a victim's token in flight is dropped and generated again
by its re-prefill (``servesim_sglang.overlap``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from servesim_sglang import overlap
from servesim_sglang.conformance import (
    build_engine,
    compare_steps,
    load_golden,
    oracle_outputs,
    run_servesim,
)
from servesim_sglang.rank import SglangRank

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sglang_oracle_prio"
SCENARIOS = sorted(p.name for p in GOLDEN.iterdir() if (p / "steps.jsonl").is_file())
PROFILE = {"profile": "sglang-0.5.23"}
OVERLAP = [n for n in SCENARIOS if load_golden(GOLDEN / n)[1].overlap]


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
    assert len(OVERLAP) >= 3
    assert {opts[n].page_size for n in OVERLAP} == {1, 16}
    assert {opts[n].schedule_policy for n in OVERLAP} == {"fcfs", "lof"}
    assert all(opts[n].ignore_eos for n in OVERLAP)  # the oracle's overlap loop needs it
    assert all(_preemptions(n) > 0 for n in OVERLAP)
    assert sum(_preemptions(n) for n in OVERLAP) >= 30


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


#: Victims preempted with a token in flight per overlap golden: (all, first tokens, last tokens).
DROPPED = {
    "prio_overlap_low_first": (4, 2, 0),
    "prio_overlap_page16_ties": (4, 0, 1),
    "prio_overlap_short_outputs": (6, 3, 3),
    "prio_overlap_slots": (4, 0, 0),
    "prio_overlap_two_slots": (8, 4, 0),
}


def test_dropped_counts_cover_the_overlap_goldens() -> None:
    assert sorted(DROPPED) == OVERLAP


@pytest.mark.parametrize("name", OVERLAP)
def test_overlap_victims_token_in_flight_is_generated_again(name: str, monkeypatch) -> None:
    """Kept (the token stays in the request), the victim's first re-prefill is one token
    longer than SGLang's, and servesim leaves the oracle's schedule there."""
    rows, opts, oracle = load_golden(GOLDEN / name)
    monkeypatch.setattr(overlap, "drop_inflight", lambda s, r: None)
    mine = run_servesim(build_engine(SglangRank, opts, PROFILE), rows, opts)
    cmp = compare_steps(oracle, mine)
    assert cmp.first_divergence is not None
    o, m = cmp.oracle_line, cmp.servesim_line
    assert o is not None and m is not None and o["mode"] == m["mode"] == "prefill"
    longer = [rid for rid, n in m["prefill"].items() if n == o["prefill"].get(rid, -1) + 1]
    assert longer and set(longer) <= set(o["resumed"]) and m["resumed"] == o["resumed"]


@pytest.mark.parametrize("name", OVERLAP)
def test_overlap_client_gets_each_token_once(name: str, monkeypatch) -> None:
    """A victim's dropped token reached the client when its pass ended: the client gets every
    request's tokens once, in order, and one completion, though the scheduler generated the
    dropped tokens (first and last ones included) twice."""
    rows, opts, _ = load_golden(GOLDEN / name)
    drops: list[tuple[int, int]] = []  # (outputs before the drop, outputs left after it)
    drop = overlap.drop_inflight

    def counting(s, r) -> None:
        if r.inflight:
            drops.append((r.output_len, r.remaining_output))
        drop(s, r)

    monkeypatch.setattr(overlap, "drop_inflight", counting)
    engine = build_engine(SglangRank, opts, PROFILE)
    tokens: dict[int, list[int]] = defaultdict(list)
    completions: Counter[int] = Counter()
    complete = engine.complete_pass

    def spy(pass_id, now):
        done = complete(pass_id, now)
        for rc in done.by_rank:
            batch = rc.effects.outputs
            assert batch.token_ids is not None
            for rid, tok in zip(batch.token_request_ids, batch.token_ids, strict=True):
                assert completions[rid] == 0, f"token for {rid} after its completion"
                tokens[rid].append(tok)
            completions.update(batch.completed)
        return done

    monkeypatch.setattr(engine, "complete_pass", spy)
    run_servesim(engine, rows, opts)
    for i, row in enumerate(rows):
        n = max(1, int(row["output_length"]))
        assert tokens[i] == list(oracle_outputs(i, n, opts.ignore_eos)), i
        assert completions[i] == 1, i
    first = sum(1 for k, _ in drops if k == 1)
    last = sum(1 for _, left in drops if left == 0)
    assert (len(drops), first, last) == DROPPED[name]
