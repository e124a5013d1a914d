"""LruEviction (batched queue with lazy deletion) against an ordered dict, the plain LRU: the
same victims in the same order, the same membership and length after every operation,
including stale entries, their compaction and pushes of blocks that are already present."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.kv import eviction
from servesim.kv.eviction import EvictionPolicy, LruEviction

N = 24
steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.lists(st.integers(0, N - 1), min_size=1, max_size=6)),
        st.tuples(st.just("remove"), st.integers(0, 10**6)),
        st.tuples(st.just("pop"), st.integers(0, 10**6)),
    ),
    max_size=80,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(steps=steps, slack=st.sampled_from([0, 2, 4096]))
def test_lru_matches_an_ordered_dict(steps: list, slack: int) -> None:
    saved = eviction._COMPACT_SLACK  # noqa: SLF001
    eviction._COMPACT_SLACK = slack  # noqa: SLF001 - compact often to test it
    try:
        lru, model = LruEviction(), OrderedDict()
        for kind, arg in steps:
            if kind == "push":
                lru.push_many(list(arg)) if len(arg) > 1 else lru.push(arg[0])
                for b in arg:
                    model.setdefault(b, None)  # a present block keeps its place
            elif kind == "remove" and model:
                b = list(model)[arg % len(model)]
                lru.remove(b)
                del model[b]
            elif kind == "pop" and model:
                n = arg % (len(model) + 1)
                got = lru.pop_many(n) if n != 1 else [lru.pop()]
                assert got == [model.popitem(last=False)[0] for _ in range(n)]
            assert len(lru) == len(model)
            assert [b for b in range(-1, N + 2) if b in lru] == sorted(model)
        assert lru.pop_many(len(model)) == list(model)
    finally:
        eviction._COMPACT_SLACK = saved  # noqa: SLF001


def test_lru_errors_match_the_ordered_dict() -> None:
    lru = LruEviction()
    with pytest.raises(KeyError):
        lru.pop()
    with pytest.raises(KeyError):
        lru.remove(3)
    lru.push_many([5, 2])
    with pytest.raises(KeyError):
        lru.pop_many(3)
    with pytest.raises(ValueError):
        lru.push_many([7, -1])
    assert lru.pop_many(2) == [5, 2] and "x" not in lru and 10**9 not in lru


def test_default_bulk_methods_loop_over_push_and_pop() -> None:
    class Fifo(EvictionPolicy):
        def __init__(self) -> None:
            self.q: list[int] = []

        def push(self, block_id: int) -> None:
            self.q.append(block_id)

        def remove(self, block_id: int) -> None:
            self.q.remove(block_id)

        def pop(self) -> int:
            return self.q.pop(0)

        def __len__(self) -> int:
            return len(self.q)

        def __contains__(self, block_id: object) -> bool:
            return block_id in self.q

    f = Fifo()
    f.push_many([4, 1, 9])
    assert f.pop_many(2) == [4, 1] and f.q == [9]
