"""Eviction policies order the inactive (evictable) blocks of a block pool.

A policy sees block ids only. The pool calls :meth:`EvictionPolicy.push` when a cached block's
reference count drops to zero, :meth:`remove` when a request reuses it, and :meth:`pop` to
choose a victim when it needs a free block. Register policies through
``servesim_register_eviction_policies``; ``lru`` is built in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import ClassVar


class EvictionPolicy(ABC):
    """Orders evictable blocks."""

    config_class: ClassVar[type | None] = None

    @abstractmethod
    def push(self, block_id: int) -> None:
        """A block became evictable (it is the newest now)."""

    @abstractmethod
    def remove(self, block_id: int) -> None:
        """A block stopped being evictable (reused). It is present."""

    @abstractmethod
    def pop(self) -> int:
        """Remove and return the next victim. Only called when ``len(self) > 0``."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, block_id: object) -> bool: ...


class LruEviction(EvictionPolicy):
    """Evict the block that became evictable longest ago (dynamo-mocker.md §3.2: oldest
    insertion time first; vLLM v1's free-block queue behaves the same way)."""

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def push(self, block_id: int) -> None:
        self._order[block_id] = None

    def remove(self, block_id: int) -> None:
        del self._order[block_id]

    def pop(self) -> int:
        return self._order.popitem(last=False)[0]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._order
