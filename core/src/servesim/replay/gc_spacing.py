"""Fewer garbage collections during a replay.

A replay allocates many short-lived objects (events, records, lines, tuples) and holds a
large, long-lived heap (the workload, the pools, the router's index). With the interpreter's
default first threshold (700 net allocations) the young generation is collected thousands of
times, and each promotion counts towards the full collections that walk the whole heap.
:func:`young_collections_spaced` raises that threshold for the duration of a replay and puts
the previous thresholds back afterwards. Collection timing never changes what a replay
computes (nothing in it depends on when an unreachable object is freed), only its cost.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations between young collections during a replay (the interpreter's default: 700).
YOUNG_THRESHOLD = 10_000


@contextmanager
def young_collections_spaced() -> Iterator[None]:
    """Raise the first collection threshold to at least :data:`YOUNG_THRESHOLD` while the
    block runs (the others, and automatic collection itself, as they were)."""
    before = gc.get_threshold()
    if before[0] and before[0] < YOUNG_THRESHOLD:  # 0: automatic collection is off; keep it so
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


__all__ = ["YOUNG_THRESHOLD", "young_collections_spaced"]
