"""``lfu``: evict the least frequently used unit first, the least recently used among equals.

SGLang 0.5.23's ``--radix-eviction-policy lfu`` (``mem_cache/evict_policy.py``,
``LFUStrategy.get_priority``) orders the evictable leaves by ``(hit_count, last_access_time)``
and pops the smallest (``RadixCache.evict``'s heap). Here the key is the record's
``(hit_count, last_access_ms)``, ties by the order units became evictable; the same rule
applies to the vLLM and TRT-LLM block pools, whose units are the cached blocks no request
holds. SGLang measures access in wall-clock time; a record's ``last_access_ms`` is simulated
time, so equal instants (one pass) fall back to insertion order, which is deterministic.
"""

from __future__ import annotations

from servesim.kv.eviction import EvictableBlock
from servesim.kv.eviction_keyed import KeyedEviction


class LfuEviction(KeyedEviction):
    """Fewest hits first, then the least recently accessed."""

    def key(self, block: EvictableBlock) -> tuple[int, float]:
        return (block.hit_count, block.last_access_ms)
