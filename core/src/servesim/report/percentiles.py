"""Nearest-rank percentiles and their report keys (dynamo-mocker.md §9.3): the element at rank
``round((n-1)*p/100)`` of the sorted values, half away from zero, no interpolation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def nearest_rank_index(n: int, p: float) -> int:
    """Index into ``n`` sorted values for percentile ``p`` (0..100)."""
    return min(n - 1, max(0, math.floor((n - 1) * p / 100.0 + 0.5)))


def percentile(sorted_values: Sequence[float] | Any, p: float) -> float:
    n = len(sorted_values)
    if n == 0:
        return 0.0
    return float(sorted_values[nearest_rank_index(n, p)])


def percentile_key(p: float) -> str:
    """``99`` → ``p99``, ``99.9`` → ``p99.9`` (vLLM's key formatting, ecosystem.md §2)."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"


__all__ = ["nearest_rank_index", "percentile", "percentile_key"]
