"""The KV router's bookkeeping against plain per-slot reference models.

:class:`ClusterState` packs per-slot holder counts into one dict and :class:`KvIndex` keeps
one set per slot, both for speed; these tests replay random operation sequences (shared
prefixes, repeated hashes inside one prompt, evictions, cache clears, several DP ranks)
through them and through the straightforward formulation and require identical loads,
overlaps, costs and routing decisions.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import ClearedBlocks, KvBlock, KvEvent, RemovedBlocks, Request, StoredBlocks
from servesim.replay.cluster import ClusterState
from servesim.replay.routers import KvIndex, KvRouter, KvRouterConfig, shared_prefix
from servesim.tokens import Tokens


class RefState:
    """Per-slot ``hash -> occurrences`` dicts, one Python step per block."""

    def __init__(self, n: int) -> None:
        self.active_requests = [0] * n
        self.prefill_tokens = [0] * n
        self.active_blocks = [0] * n
        self.active_hashes: list[dict[int, int]] = [{} for _ in range(n)]
        self.req: dict[int, tuple[int, int, int, tuple[int, ...] | None, int]] = {}
        self.prefill: dict[int, int] = {}

    def add(self, rid: int, slot: int, prefill: int, blocks: int,
            hashes: tuple[int, ...] | None) -> None:
        tail = 0
        if hashes is not None:
            counts = self.active_hashes[slot]
            fresh = 0
            for h in hashes:
                c = counts.get(h, 0)
                fresh += c == 0
                counts[h] = c + 1
            tail = blocks - len(hashes)
            blocks = fresh + tail
        self.req[rid] = (slot, prefill, blocks, hashes, tail)
        self.prefill[rid] = prefill
        self.active_requests[slot] += 1
        self.prefill_tokens[slot] += prefill
        self.active_blocks[slot] += blocks

    def prefill_done(self, rid: int) -> None:
        tokens = self.prefill.pop(rid, 0)
        if tokens:
            self.prefill_tokens[self.req[rid][0]] -= tokens

    def finish(self, rid: int) -> None:
        if rid not in self.req:
            return
        slot, _prefill, blocks, hashes, tail = self.req.pop(rid)
        self.prefill_tokens[slot] -= self.prefill.pop(rid, 0)
        if hashes is not None:
            counts = self.active_hashes[slot]
            freed = 0
            for h in hashes:
                c = counts[h] - 1
                if c:
                    counts[h] = c
                else:
                    del counts[h]
                    freed += 1
            blocks = freed + tail
        self.active_blocks[slot] -= blocks
        self.active_requests[slot] -= 1

    def new_blocks(self, slot: int, hashes: Sequence[int], blocks: int) -> int:
        return blocks - sum(h in self.active_hashes[slot] for h in hashes)


def ref_overlaps(held: list[set[int]], hashes: Sequence[int]) -> list[int]:
    out = []
    for blocks in held:
        depth = 0
        for h in hashes:
            if h not in blocks:
                break
            depth += 1
        out.append(depth)
    return out


# Prompts draw hashes from a small pool so that prefixes are shared, and may repeat a hash.
_hashes = st.lists(st.integers(0, 7), min_size=0, max_size=6)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(0, 9), _hashes),
        st.tuples(st.just("prefill"), st.integers(0, 9)),
        st.tuples(st.just("finish"), st.integers(0, 9)),
    ),
    max_size=40,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(_ops)
def test_cluster_state_matches_reference(ops) -> None:
    n = 4
    state, ref = ClusterState(2, 2), RefState(n)
    for op in ops:
        if op[0] == "add":
            _, slot, rid, hashes = op
            if rid in ref.req:
                continue
            prompt = tuple(100 + h for h in hashes)
            blocks = len(prompt) + rid % 2  # odd ids carry a partial tail block
            hashed = None if rid == 9 else prompt  # request 9 is routed without hashes
            state.add(rid, slot, 10 * rid, blocks, hashed)
            ref.add(rid, slot, 10 * rid, blocks, hashed)
        elif op[0] == "prefill":
            state.prefill_done(op[1])
            ref.prefill_done(op[1])
        else:
            state.finish(op[1])
            ref.finish(op[1])
        assert state.active_requests == ref.active_requests
        assert state.prefill_tokens == ref.prefill_tokens
        assert state.active_blocks == ref.active_blocks
        assert [set(d) for d in state.active_hashes] == [set(d) for d in ref.active_hashes]
        probe = [100 + h for h in range(8)] + [100, 103]
        assert state.held_counts(probe) == [
            len(probe) - ref.new_blocks(s, probe, len(probe)) for s in range(n)
        ]
    for rid in list(ref.req):
        state.finish(rid)
    assert state.holders == {} and state.active_blocks == [0] * n


_events = st.lists(
    st.one_of(
        st.tuples(st.just("store"), st.integers(0, 1), st.integers(0, 1), _hashes),
        st.tuples(st.just("remove"), st.integers(0, 1), st.integers(0, 1), _hashes),
        st.tuples(st.just("clear"), st.integers(0, 1), st.integers(0, 1)),
    ),
    max_size=30,
)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(_events, st.lists(_hashes, min_size=1, max_size=5))
def test_kv_index_matches_reference(events, probes) -> None:
    index = KvIndex(2)
    held: list[set[int]] = [set() for _ in range(4)]
    for ev in events:
        worker, dp = ev[1], ev[2]
        slot = worker * 2 + dp
        if ev[0] == "store":
            data = StoredBlocks(None, tuple(KvBlock(h, h) for h in ev[3]))
            held[slot].update(ev[3])
        elif ev[0] == "remove":
            data = RemovedBlocks(tuple(ev[3]))
            held[slot].difference_update(ev[3])
        else:
            data = ClearedBlocks()
            held[slot].clear()
        index.apply(worker, [KvEvent(0, dp, data)])
        for p in probes:
            assert index.overlaps(p, 4) == ref_overlaps(held, p)
        masks = {h: sum(1 << s for s in range(4) if h in held[s]) for h in set().union(*held)}
        assert index.slot_masks() == masks and len(index) == len(masks)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 3), st.integers(0, 4)),
             min_size=1, max_size=25),
    st.sampled_from([1.0, 0.5, 2.0]),
)
def test_kv_router_decisions_match_reference(requests, weight) -> None:
    """Routing with the formula and tie rule written out per slot (module docstring)."""
    bs = 4
    router = KvRouter(3, 1, bs, KvRouterConfig(overlap_score_weight=weight))
    state, ref = ClusterState(3, 1), RefState(3)
    held: list[set[int]] = [set(), set(), set()]
    nxt = 0
    for rid, (isl, family, finish_after) in enumerate(requests):
        # Prompts of one family share their leading tokens, hence leading block hashes.
        req = Request(rid, Tokens([family * 1000 + i for i in range(isl)]), 1)
        hashes = req.prompt.block_hashes(bs)[0]
        blocks = -(-isl // bs)
        overlap = ref_overlaps(held, hashes)
        new = [max(isl - o * bs, 0) for o in overlap]
        cost = [weight * (new[s] + ref.prefill_tokens[s]) / bs + ref.active_blocks[s]
                + ref.new_blocks(s, hashes, blocks) for s in range(3)]
        assert router.costs(req, hashes, state) == (cost, new)
        want = min(range(3), key=lambda s: (cost[s], ref.active_requests[s], (s - nxt) % 3))
        nxt = (want + 1) % 3
        assert router.select(req, hashes, state) == (want, 0)
        router.routed(req, want, 0, state)
        ref.add(rid, want, new[want], blocks, tuple(hashes))
        # The chosen worker caches the prompt; some earlier request finishes.
        router.on_kv_events(want, [KvEvent(rid, 0, StoredBlocks(None, tuple(
            KvBlock(h, h) for h in hashes)))])
        held[want].update(hashes)
        if finish_after < rid:
            state.finish(finish_after)
            ref.finish(finish_after)
        assert state.active_blocks == ref.active_blocks


@settings(max_examples=100, derandomize=True, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=8))
def test_shared_prefix_drops_exactly_the_trailing_negatives(hashes) -> None:
    k = len(hashes)
    while k and hashes[k - 1] < 0:
        k -= 1
    assert list(shared_prefix(hashes)) == hashes[:k]
    assert list(shared_prefix(tuple(hashes))) == hashes[:k]


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 3),
                          st.integers(0, 8)), min_size=1, max_size=20))
def test_placeholder_tails_route_like_unique_hashes(requests) -> None:
    """Prompts whose trailing blocks are the request's own score the same whether those
    blocks carry unique real hashes or negative placeholders."""
    bs = 4
    routers = [KvRouter(2, 2, bs), KvRouter(2, 2, bs)]
    states = [ClusterState(2, 2), ClusterState(2, 2)]
    for rid, (shared, own, family, finish_after) in enumerate(requests):
        prefix = [family * 100 + i for i in range(shared)]
        variants = [prefix + [10**6 + rid * 10 + i for i in range(own)],
                    prefix + [-(rid * 10 + i + 1) for i in range(own)]]
        req = Request(rid, Tokens([0] * ((shared + own) * bs + rid % 3)), 1)
        got = []
        for router, state, hashes in zip(routers, states, variants, strict=True):
            got.append((router.costs(req, hashes, state), router.select(req, hashes, state)))
            worker, dp = got[-1][1]
            router.routed(req, worker, dp, state)
            router.on_kv_events(worker, [KvEvent(rid, dp, StoredBlocks(None, tuple(
                KvBlock(h, h) for h in hashes)))])
            if finish_after < rid:
                state.finish(finish_after)
        assert got[0] == got[1]
        assert states[0].active_blocks == states[1].active_blocks
        assert states[0].prefill_tokens == states[1].prefill_tokens
