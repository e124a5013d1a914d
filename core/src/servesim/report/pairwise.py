"""numpy's float64 summation order in pure Python, so a short replay's report needs no numpy.

``ndarray.sum``/``mean``/``std`` of a one-dimensional contiguous float64 array add with
*pairwise summation* (numpy ``numpy/_core/src/umath/loops_utils.h.src``,
``DOUBLE_pairwise_sum``; the reduction starts from the identity ``0.0``):

* fewer than 8 values: added left to right, starting from ``-0.0``;
* up to 128 (``PW_BLOCKSIZE``): eight running sums, the ``k``-th over the values at
  ``k, k+8, k+16, ...`` of the largest multiple of 8, combined as
  ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))``, then the remaining values left to right;
* more: split at half the length rounded down to a multiple of 8, and the two halves'
  sums added.

:func:`pairwise_sum` performs the same IEEE additions in the same order, so its result is
numpy's bit for bit (``tests/replay/test_stats_paths.py`` checks it against numpy).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import add

_BLOCK = 128


def _block(a: Sequence[float], lo: int, n: int) -> float:
    if n < 8:
        return reduce(add, a[lo:lo + n], -0.0)
    if n <= _BLOCK:
        m = lo + n - n % 8
        r = [reduce(add, a[lo + k + 8:m:8], a[lo + k]) for k in range(8)]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        return reduce(add, a[m:lo + n], res)
    n2 = n // 2
    n2 -= n2 % 8
    return _block(a, lo, n2) + _block(a, lo + n2, n - n2)


def pairwise_sum(values: Sequence[float]) -> float:
    """numpy's ``sum`` of ``values`` (floats) as a float64 array, bit for bit."""
    return 0.0 + _block(values, 0, len(values))


__all__ = ["pairwise_sum"]
