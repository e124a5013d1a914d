"""The radix cache: matching, locks, LRU eviction, accounting and KV events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import RemovedBlocks, StoredBlocks
from servesim.kv.hashing import local_block_hash, sequence_hashes
from servesim.tokens import Tokens
from servesim_sglang.radix_cache import RadixCache


def cache_with(seqs: list[list[int]], total: int = 100, page: int = 1, **kw) -> RadixCache:
    """Cache every sequence as a finished request would (acquire, then finish)."""
    cache = RadixCache(total, page, **kw)
    for seq in seqs:
        got = cache.acquire(seq, len(seq), len(seq))
        assert got is not None
        cache.finish(got[0], seq, len(seq))
    return cache


def tree_tokens(cache: RadixCache) -> int:
    total, stack = 0, [cache.root]
    while stack:
        node = stack.pop()
        total += len(node.key)
        stack.extend(node.children.values())
    return total


def test_match_is_token_granular_with_page_one() -> None:
    cache = cache_with([[1, 2, 3, 4, 5], [1, 2, 3, 6, 7]])
    assert cache.match_len([1, 2, 3, 4, 5], 5) == 5
    assert cache.match_len([1, 2, 3, 6, 7, 8], 6) == 5
    assert cache.match_len([1, 2, 3, 9], 4) == 3
    assert cache.match_len([1, 2, 3, 4, 5], 4) == 4  # capped by the limit
    assert cache.match_len([9], 1) == 0
    # one shared edge [1,2,3] with two children
    assert sorted(len(c.key) for c in cache.root.children.values()) == [3]
    assert cache.free_pages == 100 - 7
    assert cache.evictable_size == 7 and cache.protected_size == 0


def test_match_is_page_aligned() -> None:
    cache = cache_with([[1, 2, 3, 4, 5, 6, 7]], page=4)
    # only the full page [1..4] was cached; the partial tail page was freed
    assert cache.match_len([1, 2, 3, 4, 5, 6, 7, 8], 8) == 4
    assert cache.match_len([1, 2, 3, 9, 5, 6, 7, 8], 8) == 0
    assert cache.free_pages == 25 - 1


def test_duplicate_insert_adopts_the_tree_pages() -> None:
    cache = RadixCache(20, 1)
    a = cache.acquire([1, 2, 3, 4], 0, 4)
    b = cache.acquire([1, 2, 3, 4], 0, 4)
    assert a is not None and b is not None
    assert cache.free_pages == 12
    cache.cache_prefix(a[0], [1, 2, 3, 4], 4)
    cache.cache_prefix(b[0], [1, 2, 3, 4], 4)  # b's 4 pages are duplicates and go back
    assert cache.free_pages == 16
    assert a[0].node is b[0].node and a[0].node.lock == 2
    assert cache.protected_size == 4 and cache.evictable_size == 0


def test_locked_prefix_survives_eviction_and_lru_order() -> None:
    cache = cache_with([[1, 1, 1], [2, 2, 2], [3, 3, 3]], total=9)
    assert cache.free_pages == 0
    got = cache.acquire([1, 1, 1, 5], 3, 3)  # matches and locks [1,1,1], needs no page
    assert got is not None and got[1] == 3
    lease = got[0]
    assert cache.protected_size == 3 and cache.evictable_size == 6
    # touch [3,3,3] so [2,2,2] is the least recently used unlocked leaf
    assert cache.match_len([3, 3, 3], 3) == 3  # read-only: no recency change
    cache.unlock(cache.acquire([3, 3, 3], 3, 3)[0].node)  # type: ignore[index]
    assert cache.evict(2) == 2  # only the newest tail pages of [2,2,2] go
    assert cache.match_len([2, 2, 2], 3) == 1
    assert cache.evict(100) == 4  # [2] then [3,3,3]; the locked [1,1,1] stays
    assert cache.match_len([1, 1, 1], 3) == 3
    assert cache.match_len([3, 3, 3], 3) == 0
    cache.release(lease)
    assert cache.evictable_size == 3 and cache.evict(3) == 3 and cache.free_pages == 9


def test_acquire_fails_without_change_when_it_cannot_fit() -> None:
    cache = RadixCache(10, 1)
    held = cache.acquire([7] * 8, 0, 8)
    assert held is not None
    before = (cache.free_pages, cache.evictable_size, cache.protected_size)
    assert cache.acquire([5, 6, 7], 0, 3) is None
    assert (cache.free_pages, cache.evictable_size, cache.protected_size) == before


def test_split_keeps_accounting_and_locks() -> None:
    cache = cache_with([[1, 2, 3, 4, 5, 6]])
    got = cache.acquire([1, 2, 3, 9, 9], 4, 5)  # partial edge match splits [1..6] at 3
    assert got is not None
    lease, prefix = got
    assert prefix == 3 and lease.node.key == [1, 2, 3] and lease.node.lock == 1
    assert cache.protected_size == 3 and cache.evictable_size == 3
    assert tree_tokens(cache) == 6


def test_stored_and_removed_events_use_core_block_hashes() -> None:
    page = 4
    prompt = list(range(100, 110))  # two full pages and a partial one
    cache = RadixCache(64, page, emit_kv_events=True, emit_token_ids=True)
    lease, _ = cache.acquire(prompt, 0, len(prompt))  # type: ignore[misc]
    cache.cache_prefix(lease, prompt, len(prompt))
    seq, local = Tokens(prompt).block_hashes(page)
    events = cache.drain_events()
    assert [e.event_id for e in events] == [0]
    stored = events[0].data
    assert isinstance(stored, StoredBlocks) and stored.parent_hash is None
    assert [b.block_hash for b in stored.blocks] == seq
    assert [b.tokens_hash for b in stored.blocks] == local
    assert stored.blocks[1].token_ids == (104, 105, 106, 107)
    # a second request extends the first page's path: parent is the shared page's hash
    other = prompt[:4] + [1, 2, 3, 4]
    lease2, hit = cache.acquire(other, 7, 8)  # type: ignore[misc]
    assert hit == 4
    cache.finish(lease2, other, 8)
    (ev,) = cache.drain_events()
    assert isinstance(ev.data, StoredBlocks) and ev.event_id == 1
    assert ev.data.parent_hash == seq[0]
    assert [b.block_hash for b in ev.data.blocks] == sequence_hashes([local_block_hash([1, 2, 3, 4])], seq[0])
    cache.finish(lease, prompt, len(prompt))
    assert cache.drain_events() == []  # nothing new entered the tree
    cache.evict(1000)
    (removed,) = cache.drain_events()
    assert isinstance(removed.data, RemovedBlocks)
    assert sorted(removed.data.block_hashes) == sorted(seq + [ev.data.blocks[0].block_hash])


def test_page_one_events_match_core_hashing() -> None:
    prompt = [5, 5, 6, 7]
    cache = RadixCache(16, 1, emit_kv_events=True)
    lease, _ = cache.acquire(prompt, 0, 4)  # type: ignore[misc]
    cache.finish(lease, prompt, 4)
    (ev,) = cache.drain_events()
    assert isinstance(ev.data, StoredBlocks)
    assert [b.block_hash for b in ev.data.blocks] == Tokens(prompt).block_hashes(1)[0]


def _apply_ops(ops: list[tuple[int, list[int]]], page: int) -> tuple[RadixCache, list[list[int]]]:
    cache = RadixCache(48, page)
    live: list = []
    cached: list[list[int]] = []
    for kind, seq in ops:
        if kind == 0 or not live:
            got = cache.acquire(seq, len(seq) - 1, len(seq))
            if got is not None:
                live.append((got[0], seq))
        elif kind == 1:
            lease, s = live.pop(0)
            cache.finish(lease, s, len(s))
            cached.append(s)
        elif kind == 2:
            lease, s = live.pop()
            cache.release(lease)
        else:
            cache.evict(len(seq))
        assert cache.free_pages + cache.used_pages == cache.total_pages
        assert 0 <= cache.free_pages <= cache.total_pages
        assert cache.evictable_size >= 0 and cache.protected_size >= 0
        assert cache.evictable_size + cache.protected_size == tree_tokens(cache)
        private = sum(lease.pages - lease.cached // page for lease, _ in live)
        assert cache.used_pages * page == tree_tokens(cache) + private * page
    return cache, cached


seqs = st.lists(st.integers(0, 3), min_size=1, max_size=14)
ops = st.lists(st.tuples(st.integers(0, 3), seqs), max_size=30)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(ops=ops, page=st.sampled_from([1, 2, 4]))
def test_random_operations_keep_the_books(ops: list[tuple[int, list[int]]], page: int) -> None:
    _apply_ops(ops, page)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(stored=st.lists(seqs, max_size=8), probe=seqs, page=st.sampled_from([1, 2, 3]))
def test_match_equals_longest_common_page_prefix(
    stored: list[list[int]], probe: list[int], page: int
) -> None:
    cache = cache_with(stored, total=1000, page=page)

    def common(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    best = max((min(common(s, probe), len(s) - len(s) % page) for s in stored), default=0)
    assert cache.match_len(probe, len(probe)) == best - best % page


def _pool_stored(seqs: list[list[int]], page: int) -> list[tuple[int | None, tuple[int, ...]]]:
    """Stored events of core's block pool caching the same sequences (full blocks only)."""
    from servesim.kv.pool import BlockPool, BlockTable

    pool = BlockPool(64, emit_events=True)
    tables = []
    for seq in seqs:
        hashes, local = Tokens(seq).block_hashes(page)
        table = BlockTable()
        cached, _ = pool.lookup(hashes)
        assert pool.allocate(table, len(hashes), hashes[:cached])
        pool.finalize(table, len(hashes), hashes, local)
        tables.append(table)
    return [
        (e.data.parent_hash, tuple(b.block_hash for b in e.data.blocks))
        for e in pool.drain_events()
        if isinstance(e.data, StoredBlocks)
    ]


def test_stored_events_equal_core_block_pool_events() -> None:
    """A router indexing either backend sees the same (parent, blocks) batches."""
    page = 4
    a = list(range(1, 15))  # 3 full pages + 2 tokens
    b = a[:8] + [77] * 9  # shares 2 pages, then 2 full pages of its own
    c = a[:12] + [5, 6, 7, 8]  # shares all 3 of a's full pages, adds one
    cache = RadixCache(64, page, emit_kv_events=True)
    for seq in (a, b, c):
        lease, _ = cache.acquire(seq, len(seq), len(seq))  # type: ignore[misc]
        cache.finish(lease, seq, len(seq))
    ours = [
        (e.data.parent_hash, tuple(blk.block_hash for blk in e.data.blocks))
        for e in cache.drain_events()
        if isinstance(e.data, StoredBlocks)
    ]
    assert ours == _pool_stored([a, b, c], page)
    assert [len(blocks) for _, blocks in ours] == [3, 2, 1]


def test_deferred_decode_touch_keeps_lru_order_of_ancestors() -> None:
    """The in-place decode fast path defers the recency touch of the locked path; once the
    lease is released the shared ancestor must be as recent as its latest decode step."""
    cache = RadixCache(200, 1)
    prefix = [1] * 10
    x = prefix + [2, 2]
    got = cache.acquire(x, len(x), len(x))
    assert got is not None
    cache.finish(got[0], x, len(x))  # node P+x
    a = prefix + [3, 3]
    lease_a, hit = cache.acquire(a, len(a), len(a))  # type: ignore[misc]
    assert hit == 10  # splits P+x into P and x, locks P
    cache.cache_prefix(lease_a, a, len(a))  # A's leaf [3,3] under P
    other = [9, 9, 9]
    lease_l, _ = cache.acquire(other, 0, 3)  # type: ignore[misc]
    cache.cache_prefix(lease_l, other, 3)  # L's leaf, locked, newer than P's last touch
    a.append(4)
    cache.grow(lease_a, 1)
    cache.cache_prefix(lease_a, a, len(a))  # fast path: P's touch is deferred
    cache.release(lease_a)
    assert cache.evict(2 + 3) == 5  # x (oldest) then A's leaf; P is now a leaf
    assert cache.match_len(a, len(a)) == 10
    cache.release(lease_l)
    cache.evict(1)  # L was touched before A's last decode step, so L goes first
    assert cache.match_len(prefix, 10) == 10
    assert cache.match_len(other, 3) == 2


def test_split_at_cuts_the_edge_at_the_prompt_so_eviction_keeps_the_prompt() -> None:
    """``prompt_boundary_split``: a re-prefilled prompt (4 tokens) and its outputs (6) cached
    as one leaf are split at the prompt's end; a whole-leaf eviction then frees the outputs
    only, where the unsplit leaf goes at once."""
    seq = [1, 2, 3, 4, 50, 51, 52, 53, 54, 55]
    for split, left in ((False, 0), (True, 4)):
        cache = cache_with([seq], total=20)
        cache.evict_whole_leaves = True
        before = (cache.evictable_size, cache.protected_size, cache.free_pages)
        if split:
            cache.split_at(seq, 4)
        assert (cache.evictable_size, cache.protected_size, cache.free_pages) == before
        assert [len(c.key) for c in cache.root.children.values()] == [4 if split else 10]
        assert cache.evict(3) == 10 - left
        assert cache.evictable_size == left and cache.match_len(seq, 10) == left


def test_split_at_a_node_boundary_or_past_the_cached_path_changes_nothing() -> None:
    cache = cache_with([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 7, 8]], total=20)
    cache.split_at([1, 2, 3, 4, 5, 6], 4)  # already a boundary
    cache.split_at([9, 8], 2)  # not cached
    (top,) = cache.root.children.values()
    assert top.key == [1, 2, 3, 4] and sorted(c.key for c in top.children.values()) == [[5, 6], [7, 8]]
    assert cache.evictable_size == 8
