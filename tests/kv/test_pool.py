"""BlockPool: the reference's lifecycle tests (dynamo-mocker.md §3.2) and event ordering (§3.4)."""

from __future__ import annotations

import pytest
from servesim.contract import KvBlock, RemovedBlocks, StoredBlocks
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.kv.pool import BlockPool, BlockTable


def hashes(*names: int) -> list[int]:
    """Stand-in sequence hashes: small ints are as good as xxh3 values for the pool."""
    return [1000 + n for n in names]


def local(*names: int) -> list[int]:
    return [2000 + n for n in names]


def use(pool: BlockPool, names: list[int], cached_names: int, full: int) -> BlockTable:
    """Allocate a table for ``names`` reusing the first ``cached_names`` and finalising ``full``."""
    t = BlockTable()
    seq = hashes(*names)
    assert pool.allocate(t, len(names), seq[:cached_names])
    pool.finalize(t, full, seq, local(*names))
    return t


def test_block_lifecycle_stringent() -> None:
    """dynamo-mocker.md §3.2 ``test_block_lifecycle_stringent`` in the lease model: a block
    that is never finalised plays the reference's partial block (``Destroy``)."""
    pool = BlockPool(10, emit_events=True)
    a = use(pool, [0, 1, 2, 3, 4], 0, 4)  # 4 stays private
    assert pool.lookup(hashes(0, 1, 5, 6)) == (2, 2)
    b = use(pool, [0, 1, 5, 6], 2, 3)  # 6 stays private
    refs = {n: pool.refcount(bid) for n, bid in zip([0, 1, 2, 3, 4], a.ids)}
    assert refs == {0: 2, 1: 2, 2: 1, 3: 1, 4: 1}
    assert [pool.refcount(x) for x in b.ids] == [2, 2, 1, 1]
    assert (pool.num_active, pool.num_inactive, pool.num_free) == (7, 0, 3)

    pool.release(a)
    assert (pool.num_active, pool.num_inactive, pool.num_free) == (4, 2, 4)
    pool.release(b)
    assert (pool.num_active, pool.num_inactive, pool.num_free) == (0, 5, 5)
    assert pool.cached_hashes() == set(hashes(0, 1, 2, 3, 5))
    assert pool.lookup(hashes(0, 1, 2, 7)) == (3, 0)

    c = use(pool, [0, 1, 2, 7, 8, 9], 3, 6)
    assert (pool.num_active, pool.num_inactive, pool.num_free) == (6, 2, 2)
    d = use(pool, [10, 11, 12], 0, 3)  # 2 free + 1 eviction: the oldest inactive block (3)
    assert pool.cached_hashes() == set(hashes(0, 1, 2, 5, 7, 8, 9, 10, 11, 12))
    e = use(pool, [13], 0, 1)  # evicts 5
    assert pool.num_inactive == 0 and pool.num_active == 10
    assert not pool.is_cached(hashes(5)[0])
    assert len(c) + len(d) + len(e) == 10

    events = pool.drain_events()
    assert [ev.event_id for ev in events] == list(range(len(events)))
    kinds = [(type(ev.data).__name__, ev.data) for ev in events]
    # Stored a:[0..3]; Stored b:[5] after 1; Stored c:[7,8,9] after 2; Removed 3 before Stored d.
    assert kinds[0][1] == StoredBlocks(None, tuple(KvBlock(h, lh) for h, lh in zip(hashes(0, 1, 2, 3), local(0, 1, 2, 3))))
    assert kinds[1][1] == StoredBlocks(hashes(1)[0], (KvBlock(hashes(5)[0], local(5)[0]),))
    assert kinds[2][1].parent_hash == hashes(2)[0]
    assert kinds[3][1] == RemovedBlocks((hashes(3)[0],))
    assert kinds[4][1].parent_hash is None and len(kinds[4][1].blocks) == 3
    assert kinds[5][1] == RemovedBlocks((hashes(5)[0],))
    assert kinds[6][1] == StoredBlocks(None, (KvBlock(hashes(13)[0], local(13)[0]),))
    assert len(events) == 7
    assert pool.drain_events() == []


def test_failure_on_max_capacity_changes_nothing() -> None:
    """dynamo-mocker.md §3.2 ``test_failure_on_max_capacity``: the 11th block fails cleanly."""
    pool = BlockPool(10)
    t = BlockTable()
    assert pool.allocate(t, 10)
    u = BlockTable()
    assert not pool.allocate(u, 1)
    assert len(u) == 0 and pool.num_active == 10
    # All or nothing: growing t by two when only one block could come back fails too.
    pool.release(t)
    v = BlockTable()
    assert pool.allocate(v, 9)
    assert not pool.allocate(u, 2)
    assert len(u) == 0 and pool.num_free == 1
    assert pool.allocate(u, 1)


def test_allocation_prefers_free_blocks_and_pins_reused_inactive_blocks() -> None:
    pool = BlockPool(4, emit_events=True)
    a = use(pool, [0, 1], 0, 2)
    pool.release(a)  # 0,1 inactive, 2 free
    assert (pool.num_free, pool.num_inactive) == (2, 2)
    b = BlockTable()
    # Reusing 0 and 1 leaves only the 2 free blocks for fresh ones: 3 fresh must fail.
    assert not pool.allocate(b, 5, hashes(0, 1))
    assert pool.allocate(b, 4, hashes(0, 1))
    assert pool.cached_hashes() == set(hashes(0, 1))
    assert b.num_cached == 2 and pool.num_active == 4
    events = pool.drain_events()
    assert not any(isinstance(ev.data, RemovedBlocks) for ev in events)


def test_duplicate_copies_publish_once_and_remove_on_last_copy() -> None:
    pool = BlockPool(4, emit_events=True)
    a = use(pool, [0, 1], 0, 2)
    b = use(pool, [0, 1], 1, 2)  # recomputes block 1: a second physical copy of hash 1
    assert a.ids[1] != b.ids[1] and a.ids[0] == b.ids[0]
    stored = pool.drain_events()
    assert len(stored) == 1 and isinstance(stored[0].data, StoredBlocks)
    pool.release(a)
    pool.release(b)
    assert pool.num_inactive == 3
    t = BlockTable()
    assert pool.allocate(t, 1)  # free block first: no eviction yet
    assert pool.drain_events() == []
    # Released tail first: a's copy of 1, then b's copy of 1, then the shared 0. Evicting
    # the first copy of 1 is silent; the second is the last copy, so 1 is removed.
    assert pool.allocate(t, 3)
    ev = pool.drain_events()
    assert [e.data for e in ev] == [RemovedBlocks((hashes(1)[0],))]
    assert pool.is_cached(hashes(0)[0]) and not pool.is_cached(hashes(1)[0])
    assert pool.allocate(t, 4)
    assert [e.data for e in pool.drain_events()] == [RemovedBlocks((hashes(0)[0],))]
    assert pool.cached_hashes() == set()


def test_stored_batches_split_at_duplicates() -> None:
    pool = BlockPool(8, emit_events=True)
    use(pool, [0, 1], 0, 2)
    pool.drain_events()
    seq = hashes(0, 1, 2, 3)
    t = BlockTable()
    # Allocate 4 fresh blocks and finalise them all: 0 and 1 duplicate, 2..3 new after 1.
    assert pool.allocate(t, 4)
    pool.finalize(t, 4, seq, local(0, 1, 2, 3))
    ev = [e.data for e in pool.drain_events()]
    assert ev == [StoredBlocks(hashes(1)[0], (KvBlock(hashes(2)[0], local(2)[0]), KvBlock(hashes(3)[0], local(3)[0])))]


def test_events_carry_dp_rank_and_are_off_by_default() -> None:
    quiet = BlockPool(4)
    use(quiet, [0], 0, 1)
    assert quiet.drain_events() == [] and not quiet.events_enabled
    loud = BlockPool(4, emit_events=True, dp_rank=3)
    use(loud, [0], 0, 1)
    assert [e.dp_rank for e in loud.drain_events()] == [3]


def test_prefix_caching_off_shares_nothing_and_publishes_nothing() -> None:
    pool = BlockPool(4, enable_prefix_caching=False, emit_events=True)
    a = use(pool, [0, 1], 0, 2)
    assert pool.lookup(hashes(0, 1)) == (0, 0)
    assert pool.cached_hashes() == set()
    pool.release(a)
    assert (pool.num_free, pool.num_inactive) == (4, 0)
    assert pool.drain_events() == []


def test_real_hashes_chain() -> None:
    """Two prompts share block i only when blocks 0..i agree (§3.1)."""
    l0 = local_block_hash([1, 2])
    l1 = local_block_hash([3, 4])
    assert chain_hash(None, l0) == l0
    assert chain_hash(chain_hash(None, l1), l1) != chain_hash(l0, l1)


def test_release_twice_is_an_error_and_reuse_of_missing_prefix_raises() -> None:
    pool = BlockPool(2)
    t = BlockTable()
    assert pool.allocate(t, 1)
    ids = list(t.ids)
    pool.release(t)
    t.ids = ids
    with pytest.raises(RuntimeError):
        pool.release(t)
    with pytest.raises(KeyError):
        pool.allocate(BlockTable(), 1, hashes(9))


def test_stored_events_carry_token_ids_when_asked() -> None:
    pool = BlockPool(4, emit_events=True)
    t = BlockTable()
    assert pool.allocate(t, 2)
    pool.finalize(t, 2, hashes(0, 1), local(0, 1), lambda i: [10 * i, 10 * i + 1])
    (ev,) = pool.drain_events()
    assert [b.token_ids for b in ev.data.blocks] == [(0, 1), (10, 11)]


def test_coalesced_removals_give_the_router_index_the_same_hashes() -> None:
    """``coalesce_removals`` (KV router as the only event consumer): the evictions of one
    allocation become one ``Removed`` event, listing the evicted hashes in eviction order, and
    a :class:`~servesim.replay.routers.KvIndex` fed either stream holds the same hashes."""
    from servesim.replay.routers import KvIndex

    def play(coalesce: bool) -> tuple[list, KvIndex]:
        pool = BlockPool(6, emit_events=True)
        pool.coalesce_removals = coalesce
        index = KvIndex(1)
        events = []
        for names in ([0, 1, 2], [3, 4, 5], [6, 7, 8, 9], [0, 1, 10]):
            t = use(pool, names, 0, len(names))
            pool.release(t)
            evs = pool.drain_events()
            index.apply(0, evs)
            events.extend(e.data for e in evs)
        return events, index

    per_block, idx_a = play(False)
    coalesced, idx_b = play(True)
    removed_a = [d.block_hashes for d in per_block if isinstance(d, RemovedBlocks)]
    removed_b = [d.block_hashes for d in coalesced if isinstance(d, RemovedBlocks)]
    assert removed_a == [(1002,), (1001,), (1000,), (1005,), (1004,), (1003,), (1009,)]
    assert removed_b == [(1002, 1001, 1000, 1005), (1004, 1003, 1009)]
    assert [d for d in per_block if isinstance(d, StoredBlocks)] == [
        d for d in coalesced if isinstance(d, StoredBlocks)]
    assert idx_a._index == idx_b._index  # noqa: SLF001
    assert sorted(idx_b._index) == [1000, 1001, 1006, 1007, 1008, 1010]  # noqa: SLF001
