"""A base for record eviction policies that evict the record with the smallest key.

:class:`KeyedEviction` keeps the evictable records in a heap ordered by ``key(record)``
(computed when the record is inserted: a record does not change while a policy holds it),
ties broken by insertion order. Removing a record only forgets it; the heap skips forgotten
entries when it reaches them and is rebuilt once they outnumber the live ones, so memory stays
proportional to the evictable units. LFU (``(hit_count, last_access_ms)``, SGLang's
``LFUStrategy``) and tiered LRU are a key each.
"""

from __future__ import annotations

import heapq
from abc import abstractmethod
from typing import Any

from servesim.kv.eviction import EvictableBlock, RecordEvictionPolicy


class KeyedEviction(RecordEvictionPolicy):
    """Evict the held record with the smallest ``(key(record), insertion order)``."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self._heap: list[tuple[Any, int, EvictableBlock]] = []
        self._held: dict[EvictableBlock, int] = {}  # record -> order of its live heap entry
        self._order = 0

    @abstractmethod
    def key(self, block: EvictableBlock) -> Any:
        """The record's eviction key: smaller is evicted first."""

    def insert(self, block: EvictableBlock, now_ms: float) -> None:
        if block in self._held:
            raise ValueError(f"{block!r} is already evictable")
        self._order += 1
        self._held[block] = self._order
        heapq.heappush(self._heap, (self.key(block), self._order, block))

    def remove(self, block: EvictableBlock, now_ms: float) -> None:
        del self._held[block]
        if len(self._heap) > 2 * len(self._held) + 64:
            self._heap = [e for e in self._heap if self._held.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    def evict(self, now_ms: float) -> EvictableBlock:
        heap = self._heap
        held = self._held
        while heap:
            _, order, block = heapq.heappop(heap)
            if held.get(block) == order:
                del held[block]
                return block
        raise KeyError("evict from an empty eviction policy")

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, block: object) -> bool:
        return block in self._held


__all__ = ["KeyedEviction"]
