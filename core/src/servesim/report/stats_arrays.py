"""The report's statistics in numpy, for large samples (``servesim.report.stats.ARRAY_MIN``).

The same results as the list versions in :mod:`servesim.report.stats`, bit for bit: sorting,
numpy's pairwise mean and std, and exact weighted sums from the same float operations.
Imported only when a sample is that large, so short replays never import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from servesim.report.percentiles import nearest_rank_index, percentile, percentile_key


def distribution_array(
    name: str, values: Any, percentiles: Iterable[float], unit: str = "_ms",
    presorted: bool = False,
) -> dict[str, float]:
    """:func:`servesim.report.stats.distribution` in numpy."""
    vals = np.asarray(values, dtype=np.float64)
    if not presorted:
        vals = np.sort(vals)
    n = len(vals)
    out = {
        f"mean_{name}{unit}": float(vals.mean()) if n else 0.0,
        f"median_{name}{unit}": percentile(vals, 50.0),
        f"std_{name}{unit}": float(vals.std()) if n else 0.0,
        f"max_{name}{unit}": float(vals[-1]) if n else 0.0,
    }
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}{unit}"] = percentile(vals, p)
    return out


def weighted_sorted_array(values: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`servesim.report.stats.weighted_sorted` in numpy."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.int64)
    keep = weights > 0
    uniq, inverse = np.unique(values[keep], return_inverse=True)
    counts = np.bincount(inverse, weights=weights[keep]).astype(np.int64) if uniq.size else (
        np.zeros(0, dtype=np.int64))
    return uniq, counts


def sorted_weighted_distribution_array(
    name: str, uniq: Any, counts: Any, percentiles: Iterable[float], unit: str = "_ms",
) -> dict[str, float]:
    """:func:`servesim.report.stats.sorted_weighted_distribution` in numpy."""
    uniq = np.asarray(uniq, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return distribution_array(name, np.zeros(0), percentiles, unit)
    cum = np.cumsum(counts)

    def at(rank: int) -> float:
        return float(uniq[int(np.searchsorted(cum, rank, side="right"))])

    mean = exact_dot_array(uniq, counts) / n
    dev = uniq - mean
    var = exact_dot_array(dev * dev, counts) / n
    out = {
        f"mean_{name}{unit}": mean,
        f"median_{name}{unit}": at(nearest_rank_index(n, 50.0)),
        f"std_{name}{unit}": math.sqrt(var),
        f"max_{name}{unit}": float(uniq[-1]),
    }
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}{unit}"] = at(nearest_rank_index(n, p))
    return out


def exact_dot_array(x: np.ndarray, w: np.ndarray) -> float:
    """:func:`servesim.report.stats.exact_dot` element-wise."""
    a = x
    b = w.astype(np.float64)  # integer weights below 2**53 are exact
    prod = a * b
    split = 134217729.0  # 2**27 + 1 (Veltkamp)
    ca, cb = split * a, split * b
    ah = ca - (ca - a)
    al = a - ah
    bh = cb - (cb - b)
    bl = b - bh
    err = ((ah * bh - prod) + ah * bl + al * bh) + al * bl
    # fsum reads the doubles through a memoryview one at a time: the same values in the same
    # order as a list of them, without one Python float per value alive at once.
    return math.fsum(memoryview(np.concatenate([prod, err])))


__all__ = [
    "distribution_array",
    "exact_dot_array",
    "sorted_weighted_distribution_array",
    "weighted_sorted_array",
]
