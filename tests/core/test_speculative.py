"""servesim.mechanics.speculative: the acceptance sampler and vLLM-named report keys
(aisimulate-engine.md §10, §13.8)."""

from __future__ import annotations

import pytest
from servesim.config.engine import EngineConfig
from servesim.mechanics.speculative import AcceptanceTally, SpeculativeSampler, acceptance_report


def test_zero_and_one_rates_are_exact() -> None:
    assert [SpeculativeSampler((1.0, 1.0, 1.0), 7).draw() for _ in range(5)] == [4] * 5
    assert [SpeculativeSampler((0.0, 1.0), 7).draw() for _ in range(5)] == [1] * 5


def test_sampling_stops_at_the_first_rejection() -> None:
    s = SpeculativeSampler((1.0, 0.0, 1.0), 3)
    assert {s.draw() for _ in range(100)} == {2}
    assert s.tally.per_pos == [100, 0, 0]


def test_equal_seeds_give_equal_streams_and_offsets_distinct_ones() -> None:
    a = SpeculativeSampler.from_config(EngineConfig(aic_nextn=3), 0)
    b = SpeculativeSampler.from_config(EngineConfig(aic_nextn=3), 0)
    c = SpeculativeSampler.from_config(EngineConfig(aic_nextn=3), 1)
    assert a is not None and b is not None and c is not None
    assert a.rates == (0.85, 0.3, 0.0)  # the default rates, truncated to nextn
    draws = [a.draw() for _ in range(200)]
    assert draws == [b.draw() for _ in range(200)]
    assert draws != [c.draw() for _ in range(200)]
    assert SpeculativeSampler.from_config(EngineConfig(), 0) is None


def test_empirical_mean_matches_the_conditional_expectation() -> None:
    rates = (0.85, 0.6, 0.3)
    s = SpeculativeSampler(rates, 42)
    n = 200_000
    mean = sum(s.draw() for _ in range(n)) / n
    assert mean == pytest.approx(1 + 0.85 + 0.85 * 0.6 + 0.85 * 0.6 * 0.3, abs=0.01)


def test_sample_clamps_to_the_remaining_output_but_counts_the_draw() -> None:
    s = SpeculativeSampler((1.0, 1.0), 0)
    assert s.sample(0) == 0 and s.tally.drafts == 0  # nothing left: no forward
    assert s.sample(2) == 2 and s.sample(5) == 3
    acc = s.tally.take()
    assert (acc.forwards, acc.accepted_tokens, acc.nextn, acc.accepted_per_pos) == (2, 6, 2, (2, 2))
    assert s.tally.take().forwards == 0  # taking resets


def test_report_keys_follow_vllm_spec_decode_metrics() -> None:
    t = AcceptanceTally(3)
    for accepted in (0, 1, 3, 3):
        t.add(accepted)
    rep = acceptance_report(t.drafts, 3, t.accepted, t.per_pos)
    assert rep["spec_decode_num_drafts"] == 4
    assert rep["spec_decode_num_draft_tokens"] == 12
    assert rep["spec_decode_num_accepted_tokens"] == 7
    assert rep["spec_decode_num_accepted_tokens_per_pos"] == [3, 2, 2]
    assert rep["spec_decode_mean_acceptance_length"] == pytest.approx(1 + 7 / 4)
    assert rep["spec_decode_acceptance_rate_per_pos"] == [0.75, 0.5, 0.5]
    assert rep["spec_decode_draft_acceptance_rate"] == pytest.approx(7 / 12)
    assert acceptance_report(0, 3, 0, [0, 0, 0])["spec_decode_mean_acceptance_length"] is None
