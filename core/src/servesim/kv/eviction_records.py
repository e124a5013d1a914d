"""The block pool that drives a :class:`~servesim.kv.eviction.RecordEvictionPolicy`.

:class:`RecordBlockPool` is a :class:`~servesim.kv.pool.BlockPool` that keeps one
:class:`~servesim.kv.eviction.EvictableBlock` per cache-visible block and tells the policy
about every change (dynamo-mocker.md §3: the pool's allocation, reuse, eviction and event rules
are the plain pool's, unchanged). The plain pool sees the policy through a small id-level
adapter, :class:`_RecordOrder`, so its hot paths are shared and nothing is added to them for
the built-in ``lru``: :func:`make_block_pool` builds the plain pool for an id-level policy and
this one only for a record policy.

The ranks set :attr:`RecordBlockPool.now` at the start of every pass; a record's
``last_access_ms`` is that time for the pass that stored, reused or released the block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from servesim.kv.eviction import EvictableBlock, EvictionPolicy, RecordEvictionPolicy, uses_records
from servesim.kv.pool import BlockPool, BlockTable


class _RecordOrder(EvictionPolicy):
    """The id-level view of a record policy that the plain pool's machinery calls."""

    def __init__(self, policy: RecordEvictionPolicy, pool: RecordBlockPool) -> None:
        self.policy = policy
        self.pool = pool

    def push(self, block_id: int) -> None:
        rec = self.pool.records[block_id]
        assert rec is not None, f"block {block_id} released to eviction without a record"
        now = self.pool.now
        rec.ref_count = 0
        rec.last_access_ms = now
        self.policy.insert(rec, now)

    def remove(self, block_id: int) -> None:
        rec = self.pool.records[block_id]
        assert rec is not None
        self.policy.remove(rec, self.pool.now)

    def pop(self) -> int:
        pool = self.pool
        rec = self.policy.evict(pool.now)
        b = getattr(rec, "block_id", None)
        if not isinstance(b, int) or not 0 <= b < pool.capacity or pool.records[b] is not rec \
                or pool.refcount(b):
            raise RuntimeError(
                f"eviction policy {type(self.policy).__name__} evicted {rec!r}, which is not one "
                "of the evictable blocks it was given"
            )
        pool.records[b] = None
        return b

    def __len__(self) -> int:
        return len(self.policy)

    def __contains__(self, block_id: object) -> bool:
        if not isinstance(block_id, int) or not 0 <= block_id < self.pool.capacity:
            return False
        rec = self.pool.records[block_id]
        return rec is not None and rec in self.policy


class RecordBlockPool(BlockPool):
    """A :class:`BlockPool` whose evictable blocks are ordered by a record policy."""

    steps_only = True

    def __init__(self, num_blocks: int, *, policy: RecordEvictionPolicy, block_size: int,
                 **kwargs: Any) -> None:
        self.policy = policy
        self.block_size = block_size
        #: block id -> its record while the block is cache-visible (None otherwise).
        self.records: list[EvictableBlock | None] = [None] * max(num_blocks, 0)
        super().__init__(num_blocks, eviction=_RecordOrder(policy, self), **kwargs)

    def _reuse(self, ids: list[int], prefix: Sequence[int], n: int) -> None:
        # The plain pool's reuse, telling the policy about every hit.
        ref = self._ref
        primary = self._primary
        records = self.records
        policy = self.policy
        now = self.now
        shared = 0
        for i in range(len(ids), len(ids) + n):
            b = primary[prefix[i]]
            r = ref[b]
            rec = records[b]
            assert rec is not None
            if r == 0:
                policy.remove(rec, now)  # before the record changes: the policy holds it
                self._inactive -= 1
            elif r == 1:
                shared += 1
            rec.hit_count += 1
            rec.ref_count = r + 1
            rec.last_access_ms = now
            if r:
                policy.hit(rec, now)
            ref[b] = r + 1
            ids.append(b)
        self._shared += shared

    def finalize(self, table: BlockTable, upto: int, seq_hashes: Sequence[int],
                 local_hashes: Sequence[int],
                 block_tokens: Callable[[int], Sequence[int]] | None = None) -> None:
        start = table.num_cached
        super().finalize(table, upto, seq_hashes, local_hashes, block_tokens)
        ids = table.ids
        bs = self.block_size
        prompt = table.prompt_len
        now = self.now
        ref = self._ref
        records = self.records
        for i in range(start, table.num_cached):
            b = ids[i]
            records[b] = EvictableBlock(
                b, seq_hashes[i], seq_hashes[i - 1] if i else None, i, bs, ref_count=ref[b],
                last_access_ms=now, generated=(i + 1) * bs > prompt,
            )

    def rekey(self, table: BlockTable, lo: int, hi: int, old: Sequence[int],
              new: Sequence[int]) -> None:
        super().rekey(table, lo, hi, old, new)
        ids = table.ids
        records = self.records
        for i in range(lo, hi):
            rec = records[ids[i]]
            assert rec is not None
            rec.block_hash = new[i]
            if i + 1 < table.num_cached:
                child = records[ids[i + 1]]
                assert child is not None
                child.parent_hash = new[i]


def make_block_pool(num_blocks: int, *, eviction: Any, block_size: int, **kwargs: Any) -> BlockPool:
    """The pool for ``eviction``: a :class:`RecordBlockPool` for a record policy, the plain
    :class:`BlockPool` (with its id-level fast paths) otherwise."""
    if uses_records(eviction):
        return RecordBlockPool(num_blocks, policy=eviction, block_size=block_size, **kwargs)
    return BlockPool(num_blocks, eviction=eviction, **kwargs)


__all__ = ["RecordBlockPool", "make_block_pool"]
