"""Property tests for BlockPool (issue 2 item 5): no leaks, no negative refcounts, and the
event stream replays onto an empty index as exactly the set of cached hashes."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.contract import RemovedBlocks, StoredBlocks
from servesim.kv.hashing import chain_hash
from servesim.kv.pool import BlockPool, BlockTable

# A request's blocks are drawn from a tiny alphabet so prompts share prefixes often.
block_names = st.lists(st.integers(0, 3), min_size=1, max_size=6)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("start"), block_names, st.integers(0, 6)),
        st.tuples(st.just("grow"), st.integers(0, 7), st.integers(1, 3)),
        st.tuples(st.just("finish"), st.integers(0, 7), st.just(0)),
    ),
    max_size=40,
)


def chain(names: list[int]) -> list[int]:
    out, parent = [], None
    for n in names:
        parent = chain_hash(parent, n + 1)
        out.append(parent)
    return out


class Model:
    def __init__(self, capacity: int, caching: bool) -> None:
        self.pool = BlockPool(capacity, emit_events=True, enable_prefix_caching=caching)
        self.live: list[tuple[BlockTable, list[int], list[int]]] = []
        self.index: set[int] = set()

    def start(self, names: list[int], computed: int) -> None:
        seq = chain(names)
        cached, active = self.pool.lookup(seq)
        assert 0 <= active <= cached <= len(seq)
        t = BlockTable()
        target = max(cached, min(len(seq), cached + 1 + computed % 3))
        if self.pool.allocate(t, target, seq[:cached]):
            self.pool.finalize(t, min(target, cached + computed), seq, [n + 1 for n in names])
            self.live.append((t, seq, names))
        else:
            assert len(t) == 0

    def grow(self, which: int, more: int) -> None:
        if not self.live:
            return
        t, seq, names = self.live[which % len(self.live)]
        before = list(t.ids)
        target = min(len(seq), len(t) + more)
        if self.pool.allocate(t, target):
            self.pool.finalize(t, target, seq, [n + 1 for n in names])
        else:
            assert t.ids == before

    def finish(self, which: int) -> None:
        if self.live:
            t, _, _ = self.live.pop(which % len(self.live))
            self.pool.release(t)
            assert len(t) == 0

    def check(self) -> None:
        p = self.pool
        assert p.num_free >= 0 and p.num_inactive >= 0 and p.num_active >= 0
        assert p.num_free + p.num_active + p.num_inactive == p.capacity
        refs = Counter(b for t, _, _ in self.live for b in t.ids)
        for b in range(p.capacity):
            assert p.refcount(b) == refs.get(b, 0) >= 0
        assert p.num_active == len(refs)
        for ev in p.drain_events():
            if isinstance(ev.data, StoredBlocks):
                for blk in ev.data.blocks:
                    assert blk.block_hash not in self.index
                    self.index.add(blk.block_hash)
            elif isinstance(ev.data, RemovedBlocks):
                for h in ev.data.block_hashes:
                    self.index.remove(h)
        assert self.index == p.cached_hashes()


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, capacity=st.integers(1, 12), caching=st.booleans())
def test_pool_invariants_hold_under_random_workloads(ops: list, capacity: int, caching: bool) -> None:
    m = Model(capacity, caching)
    for op in ops:
        kind = op[0]
        if kind == "start":
            m.start(op[1], op[2])
        elif kind == "grow":
            m.grow(op[1], op[2])
        else:
            m.finish(op[1])
        m.check()
    while m.live:
        m.finish(0)
        m.check()
    assert m.pool.num_active == 0
    if not caching:
        assert m.index == set() and m.pool.num_inactive == 0


@settings(max_examples=60, derandomize=True, deadline=None)
@given(ops=ops)
def test_event_ids_are_monotonic_from_zero(ops: list) -> None:
    m = Model(6, True)
    seen: list[int] = []
    for op in ops:
        if op[0] == "start":
            m.start(op[1], op[2])
        elif op[0] == "grow":
            m.grow(op[1], op[2])
        else:
            m.finish(op[1])
        seen.extend(e.event_id for e in m.pool.drain_events())
    assert seen == list(range(len(seen)))
