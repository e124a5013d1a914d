"""Timestamp mode's first turns in arrival order, in three typed columns (a tuple per session
would take about four times the memory of a long trace's columns)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, overload


class FirstTurns:
    """Sessions' first turns sorted by ``(time, seq)``: ``ft[i]`` is ``(time, seq, rid)``,
    a slice a list of those. Times are rebased to the earliest start and divided by the
    speed-up; ``seq`` numbers the sessions in order (heap ties break by it)."""

    __slots__ = ("at", "seq", "rid")

    def __init__(self, at: array | None = None, seq: array | None = None, rid: array | None = None) -> None:
        self.at = at if at is not None else array("d")
        self.seq = seq if seq is not None else array("q")
        self.rid = rid if rid is not None else array("q")

    @classmethod
    def of(cls, starts: Sequence[float], first_rid: Sequence[int], seq0: int,
           speedup: float) -> FirstTurns:
        """Session ``i`` (start ``starts[i]``, first turn ``first_rid[i]``) gets sequence
        number ``seq0 + 1 + i``. A trace in time order (as traces are written) needs no sort."""
        n = len(starts)
        if not n:
            return cls()
        base = min(starts)
        times = array("d", ((start - base) / speedup for start in starts))
        seq = array("q", range(seq0 + 1, seq0 + 1 + n))
        rids = array("q", first_rid)
        if any(map(float.__gt__, times, times[1:])):  # not in time order: sort, ties by seq
            order = sorted(range(n), key=times.__getitem__)
            times = array("d", [times[i] for i in order])
            seq = array("q", [seq[i] for i in order])
            rids = array("q", [rids[i] for i in order])
        return cls(times, seq, rids)

    def __len__(self) -> int:
        return len(self.at)

    @overload
    def __getitem__(self, i: int) -> tuple[float, int, int]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[float, int, int]]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(zip(self.at[i], self.seq[i], self.rid[i], strict=True))
        return self.at[i], self.seq[i], self.rid[i]


__all__ = ["FirstTurns"]
