"""KV-cache mechanics shared by block-based backends: hashing, block pool, eviction.

The public API a backend builds its KV cache on (docs/writing-a-plugin.md, "The KV block
pool"): :func:`make_block_pool` (the pool for the configured eviction policy), a
:class:`BlockPool` with its lookup, allocate, finalize, release and drain_events cycle, and
one :class:`BlockTable` per request. A prompt's block hashes come from
:meth:`servesim.tokens.TokenSeq.block_hashes`.
"""

from servesim.kv.eviction import EvictionPolicy, LruEviction
from servesim.kv.eviction_records import make_block_pool
from servesim.kv.pool import BlockPool, BlockTable

__all__ = ["BlockPool", "BlockTable", "EvictionPolicy", "LruEviction", "make_block_pool"]
