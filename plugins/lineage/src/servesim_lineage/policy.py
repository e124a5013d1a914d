"""``lineage``: evict leaf blocks first, the oldest leaf first, so the newest lineage goes last.

The reference mocker's default eviction for its logical block manager (dynamo-mocker.md §3.3;
Dynamo's kvbm-logical ``LineageBackend``, ``pools/inactive/backends/lineage.rs``): the
inactive blocks form a forest through their parent hashes, only blocks without an inactive
child are candidates, candidates leave in the order they became inactive (a tick taken at
insertion), and a parent whose last inactive child goes becomes a candidate again with its
own, older tick. A sequence's tail therefore goes before its head, and a prefix that several
sequences share stays while any of their tails remains. The same rule serves SGLang's radix
tree, whose units are leaf pages already.
"""

from __future__ import annotations

import heapq
from typing import Any

from servesim.kv.eviction import EvictableBlock, RecordEvictionPolicy


class LineageEviction(RecordEvictionPolicy):
    """Leaves by ``(tick at insertion, position)``; a parent waits for its children."""

    def __init__(self) -> None:
        self._tick: dict[EvictableBlock, int] = {}  # held record -> its insertion tick
        self._by_hash: dict[Any, list[EvictableBlock]] = {}  # held records by block hash
        self._children: dict[Any, int] = {}  # block hash -> held records naming it as parent
        self._leaves: list[tuple[int, int, int, EvictableBlock]] = []  # lazily cleaned heap
        self._next = 0
        self._pushes = 0  # tie-breaker: a record may be queued more than once

    def insert(self, block: EvictableBlock, now_ms: float) -> None:
        if block in self._tick:
            raise ValueError(f"{block!r} is already evictable")
        self._next += 1
        self._tick[block] = self._next
        self._by_hash.setdefault(block.block_hash, []).append(block)
        if block.parent_hash is not None:
            self._children[block.parent_hash] = self._children.get(block.parent_hash, 0) + 1
        if not self._children.get(block.block_hash):
            self._queue(block)

    def _queue(self, block: EvictableBlock) -> None:
        self._pushes += 1
        heapq.heappush(self._leaves, (self._tick[block], block.position, self._pushes, block))
        if len(self._leaves) > 2 * len(self._tick) + 64:
            self._leaves = [e for e in self._leaves if self._is_leaf(e[3], e[0])]
            heapq.heapify(self._leaves)

    def _is_leaf(self, block: EvictableBlock, tick: int) -> bool:
        return self._tick.get(block) == tick and not self._children.get(block.block_hash)

    def remove(self, block: EvictableBlock, now_ms: float) -> None:
        del self._tick[block]
        same = self._by_hash[block.block_hash]
        same.remove(block)
        if not same:
            del self._by_hash[block.block_hash]
        parent = block.parent_hash
        if parent is None:
            return
        left = self._children[parent] - 1
        if left:
            self._children[parent] = left
            return
        del self._children[parent]
        for p in self._by_hash.get(parent, ()):
            self._queue(p)  # a leaf again, with its own (older) tick

    def evict(self, now_ms: float) -> EvictableBlock:
        leaves = self._leaves
        while leaves:
            tick, _, _, block = heapq.heappop(leaves)
            if self._is_leaf(block, tick):
                self.remove(block, now_ms)
                return block
        raise KeyError("evict from an empty eviction policy (or one without a leaf)")

    def __len__(self) -> int:
        return len(self._tick)

    def __contains__(self, block: object) -> bool:
        return block in self._tick
