"""Weighted pooled statistics (runs of passes store shared inter-token gaps with weights)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.report.stats import RequestLog, distribution, weighted_distribution

PCTS = [50.0, 90.0, 99.0, 99.9]
gaps = st.lists(st.sampled_from([0.0, 0.001, 1.0, 5.740003, 5.8, 13.25, 1e-6, 2.5]), min_size=0,
                max_size=40)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(gaps, st.lists(st.integers(0, 5), min_size=40, max_size=40), st.integers(0, 39))
def test_weighted_matches_expanded_and_ignores_how_the_multiset_is_split(
    values: list[float], weights: list[int], cut: int
) -> None:
    w = weights[: len(values)]
    expanded = np.repeat(np.asarray(values, dtype=np.float64), np.asarray(w, dtype=np.int64))
    got = weighted_distribution("itl", np.asarray(values), np.asarray(w), PCTS)
    ref = distribution("itl", expanded, PCTS)
    assert got.keys() == ref.keys()
    for key in ref:
        if key.startswith(("mean", "std")):
            assert got[key] == pytest.approx(ref[key], rel=1e-12, abs=1e-15)
        else:
            assert got[key] == ref[key]
    # The same multiset as one sample per copy: bit-identical (exact sums).
    ones = weighted_distribution("itl", expanded, np.ones(len(expanded), dtype=np.int64), PCTS)
    assert ones == got
    # Or split in two arbitrary parts, one of them merged.
    k = min(cut, len(values))
    parts = np.concatenate([np.asarray(values[:k]), expanded[int(sum(w[:k])):]])
    pw = np.concatenate([np.asarray(w[:k], dtype=np.int64),
                         np.ones(len(expanded) - int(sum(w[:k])), dtype=np.int64)])
    assert weighted_distribution("itl", parts, pw, PCTS) == got


def test_weighted_exact_values() -> None:
    got = weighted_distribution("x", np.array([2.0, 4.0, 1.0]), np.array([3, 1, 2]), [50, 99])
    # multiset 1,1,2,2,2,4: mean 2, population variance (1+1+0+0+0+4)/6 = 1
    assert got == {"mean_x_ms": 2.0, "median_x_ms": 2.0, "std_x_ms": 1.0, "max_x_ms": 4.0,
                   "p50_x_ms": 2.0, "p99_x_ms": 4.0}
    assert weighted_distribution("x", np.zeros(0), np.zeros(0, dtype=np.int64), [50])[
        "mean_x_ms"] == 0.0


def test_run_tokens_shares_gaps_but_keeps_each_first_gap() -> None:
    log = RequestLog([10, 10, 10])
    log.tokens([0, 1], 10.0)  # first tokens
    log.tokens([0], 12.0)  # request 0's second token: its first gap (2.0) is individual
    # A run starting at 12.0 with passes ending 15, 19, 24: request 1's first gap (10 -> 15)
    # is its time to second token (individual); request 0's (12 -> 15) is shared.
    log.run_tokens([0, 1], [], [15.0, 19.0, 24.0], start=12.0)
    assert list(log.itl) == [2.0, 5.0] and list(log.itl_rid) == [0, 1]
    assert list(log.shared_gap) == [3.0, 4.0, 5.0] and list(log.shared_weight) == [1, 2, 2]
    assert log.ntok == [5, 4, 0] and log.last[:2] == [24.0, 24.0]
    # A cancel suppressing request 1's token at a run's last pass:
    log.run_tokens([0, 1], [1], [30.0, 31.0], start=24.0)
    assert log.ntok == [7, 5, 0] and log.last[:2] == [31.0, 30.0]
    assert list(log.shared_weight)[-2:] == [2, 1]


def test_sorted_weighted_distribution_accepts_equal_neighbours() -> None:
    """The report's per-user throughput passes 1000/gap in reverse order without merging values
    that became equal: every statistic must match the merged multiset's."""
    from servesim.report.stats import sorted_weighted_distribution, weighted_sorted

    gaps = np.array([3.0, 7.013, 7.013000000000001, 12.25, 40.0])
    w = np.array([4, 2, 9, 1, 3])
    uniq, counts = map(np.asarray, weighted_sorted(gaps, w))
    per_user = (1000.0 / uniq)[::-1]
    assert len(np.unique(per_user)) == 4  # 1000/7.013 and 1000/7.013000000000001 round equal
    got = sorted_weighted_distribution("u", per_user, counts[::-1], PCTS, unit="")
    assert got == weighted_distribution("u", 1000.0 / gaps, w, PCTS, unit="")
    assert got["max_u"] == 1000.0 / 3.0 and got["median_u"] == 1000.0 / 7.013


def _shared_gaps_by_pass(m: int, k: int, ends: list[float], absent: int,
                         before: dict[int, list[int]], fresh: int
                         ) -> tuple[list[float], list[int], dict[int, int]]:
    """The shared gaps, weights and per-second counts of a run with completions before its
    last pass, pass by pass (the definition RequestLog._shared_gaps must give)."""
    emitting = [m] * k
    for j, rids in before.items():
        for p in range(j + 1, k):
            emitting[p] -= len(rids)
    emitting[k - 1] -= absent
    gaps, weights = [], []
    for j in range(1, k):
        w = emitting[j] - fresh if j == 1 else emitting[j]
        if w:
            gaps.append(ends[j] - ends[j - 1])
            weights.append(w)
    counts: dict[int, int] = {}
    for j in range(k):
        if emitting[j]:
            s = int(ends[j] // 1000.0)
            counts[s] = counts.get(s, 0) + emitting[j]
    return gaps, weights, counts


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.integers(1, 30), st.lists(st.floats(0.0, 900.0), min_size=1, max_size=40),
       st.data())
def test_shared_gaps_with_completions_match_pass_by_pass(m: int, durations: list[float],
                                                          data: st.DataObject) -> None:
    k = len(durations)
    ends = []
    t = 400.0
    for d in durations:
        t += d
        ends.append(t)
    left = m
    before: dict[int, list[int]] = {}
    for j in range(k - 1):
        n = data.draw(st.integers(0, min(left, 2)))
        if n:
            before[j] = list(range(left - n, left))
            left -= n
    if not before:
        before[0] = [0] if left and k > 1 else []
        if not before[0]:
            return
        left -= 1
    absent = data.draw(st.integers(0, left))
    fresh = data.draw(st.integers(0, max(0, (m - len(before.get(0, []))) if k > 1 else 0)))
    log = RequestLog([1] * m)
    log._shared_gaps(m, k, ends, None, 0, list(range(absent)), before, fresh)  # noqa: SLF001
    gaps, weights, counts = _shared_gaps_by_pass(m, k, ends, absent, before, fresh)
    assert list(log.shared_gap) == gaps
    assert list(log.shared_weight) == weights
    assert log.tokens_per_second == counts
