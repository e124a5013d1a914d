"""The report's statistics in numpy, for large samples (``servesim.report.stats.ARRAY_MIN``).

The same results as the list versions in :mod:`servesim.report.stats`, bit for bit: sorting,
numpy's pairwise mean and std, and exact weighted sums from the same float operations.
Imported only when a sample is that large, so short replays never import numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import chain
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
    """:func:`servesim.report.stats.weighted_sorted` in numpy: the distinct values, ascending,
    and each one's summed weight. Sorted once and summed by stretch of equal values, so only
    the sort order and the sorted copies are held beside the input (no inverse index)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.int64)
    keep = weights > 0
    if not keep.all():
        values, weights = values[keep], weights[keep]
    del keep
    if not values.size:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    weights = weights[order]
    del order
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.add.reduceat(weights, starts)


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


#: Elements :func:`exact_dot_array` splits at a time (its temporaries are a dozen arrays this
#: long, not a dozen of the whole input).
DOT_CHUNK = 1 << 16


def exact_dot_array(x: np.ndarray, w: np.ndarray) -> float:
    """:func:`servesim.report.stats.exact_dot` element-wise: every product split exactly into
    its rounded value and its error (Dekker), all of them summed by ``math.fsum``. fsum's
    result is the correctly rounded exact sum, whatever the order of its terms, so the
    products go to it one chunk at a time."""
    return math.fsum(chain.from_iterable(
        _products(x[i:i + DOT_CHUNK], w[i:i + DOT_CHUNK]) for i in range(0, len(x), DOT_CHUNK)))


def _products(a: np.ndarray, w: np.ndarray) -> memoryview:
    """The rounded products ``a * w`` and their exact errors, as one run of doubles."""
    b = w.astype(np.float64)  # integer weights below 2**53 are exact
    prod = a * b
    split = 134217729.0  # 2**27 + 1 (Veltkamp)
    ca, cb = split * a, split * b
    ah = ca - (ca - a)
    al = a - ah
    bh = cb - (cb - b)
    bl = b - bh
    err = ((ah * bh - prod) + ah * bl + al * bh) + al * bl
    return memoryview(np.concatenate([prod, err]))


__all__ = [
    "distribution_array",
    "exact_dot_array",
    "sorted_weighted_distribution_array",
    "weighted_sorted_array",
]
