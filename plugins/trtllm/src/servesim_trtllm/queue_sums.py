"""Queue statistics of the trtllm rank without a scan (``TrtCore.queued_prefill`` and
``queued_decode``, servesim_trtllm.core): for the forward-pass metrics' queue fields."""

from __future__ import annotations


class QueueSums:
    """Exact count / Σx / Σx² of a multiset of ints, for FPM queue statistics without a scan."""

    __slots__ = ("n", "s1", "s2")

    def __init__(self) -> None:
        self.n = 0
        self.s1 = 0
        self.s2 = 0

    def add(self, x: int, sign: int = 1) -> None:
        self.n += sign
        self.s1 += sign * x
        self.s2 += sign * x * x

    def variance(self) -> float:
        """Population variance, computed exactly on integers (0 for n ≤ 1)."""
        if self.n <= 1:
            return 0.0
        return (self.n * self.s2 - self.s1 * self.s1) / (self.n * self.n)


__all__ = ["QueueSums"]
