"""A warm start: the blocks a captured KV-event stream leaves cached, loaded into each rank's
KV cache before the first request (``workload.warm_cache``, docs/workloads.md). The pool side:
the captured blocks of one rank (:class:`CachedBlocks`) and loading them
(:func:`preload_pool`); servesim.replay.warm_capture reads the captures, in two formats:

* ``servesim_jsonl``: servesim's own KV-event JSONL (the ``jsonl`` KV sink,
  docs/configuration.md): one event per line with ``worker``, ``dp_rank``, ``type`` and, for
  ``BlockStored``, ``block_hashes`` (servesim's sequence hashes), ``parent_block_hash``,
  ``tokens_hashes`` and, when the run emitted them, ``token_ids``. Each line's ``worker`` and
  ``dp_rank`` name the rank it fills.
* ``vllm_msgpack``: vLLM's wire format, the ``KVEventBatch`` payloads a subscriber receives
  (vLLM 0.32 ``vllm/distributed/kv_events.py``: ``[ts, events, data_parallel_rank]``, each event
  a map with ``type``), concatenated in arrival order. One capture is one server: its
  batches fill worker ``worker`` (default 0), rank ``data_parallel_rank`` (0 when nil). vLLM's
  block hashes are its own, so every stored block needs its ``token_ids``: its servesim
  hashes are recomputed from them (servesim.kv.hashing), chained through the parent's.

Events are applied in order per rank: ``BlockStored`` adds blocks, ``BlockRemoved`` drops them,
``AllBlocksCleared`` drops all. What is left is loaded as *paths*: every cached block whose
ancestors are all cached ends a path from the root; the paths are loaded in the order their
last block was stored, each as a request that computed them and finished at once (lookup,
allocate, finalize, release: :func:`preload_pool`), so the most recently stored stay most
recently used and a full pool keeps the newest. Blocks whose parent is not cached (the
capture started mid-stream, or the parent was evicted) are unreachable by any lookup and are
skipped, as are blocks of a LoRA adapter and host-tier (``medium`` other than GPU) blocks.
The events the pool publishes while it loads (the ``Stored`` of each loaded block, the
``Removed`` of each block a full pool evicted to make room) are taken out of the pool and
handed back (:class:`WarmLoad`), and the pool numbers its next event 0: the replay gives them
to a KV router, which then knows exactly the blocks each rank holds, as a router subscribed
while the captured server ran would; the sinks see the run's own events only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from servesim.kv.pool import BlockTable

if TYPE_CHECKING:
    from servesim.kv.pool import BlockPool

FORMATS = ("servesim_jsonl", "vllm_msgpack")


@frozen
class WarmBlock:
    """One cached block: servesim's sequence and token-only hashes, its parent's sequence hash
    (None at the root) and its token ids when the capture has them."""

    seq_hash: int
    local_hash: int
    parent: int | None
    tokens: tuple[int, ...] | None = None


#: One path from the root: blocks 0..n-1 of some sequence.
WarmPath = tuple[WarmBlock, ...]


@frozen
class WarmLoad:
    """What a rank's preload did (servesim.rank.WarmCache): blocks ``loaded`` and ``skipped``
    (what the cache could not take), and the KV ``events`` the cache published while it
    loaded, in order (``KvEvent`` objects or, where the rank publishes them,
    servesim.kv.event_records records; empty when the rank emits no events): a KV router
    applies them to learn what the rank holds."""

    loaded: int
    skipped: int
    events: Sequence[Any] = ()


class CachedBlocks:
    """The cached blocks of one rank while the events are applied (insertion order kept)."""

    def __init__(self) -> None:
        self.blocks: dict[int, WarmBlock] = {}

    def store(self, block: WarmBlock) -> None:
        self.blocks.pop(block.seq_hash, None)  # a re-store is the newest
        self.blocks[block.seq_hash] = block

    def paths(self) -> list[WarmPath]:
        blocks = self.blocks
        has_child = {b.parent for b in blocks.values() if b.parent is not None}
        out = []
        for h, b in blocks.items():
            if h in has_child:
                continue
            path = [b]
            while path[-1].parent is not None and path[-1].parent in blocks:
                path.append(blocks[path[-1].parent])
            if path[-1].parent is None:  # reaches the root: every ancestor is cached
                out.append(tuple(reversed(path)))
        return out


def preload_pool(pool: BlockPool, paths: Sequence[WarmPath]) -> WarmLoad:
    """Load ``paths`` into ``pool`` (see the module docs); a path longer than the pool is
    skipped. The events published meanwhile are drained into the result and the pool's next
    event is numbered 0."""
    if not pool.prefix_caching:
        return WarmLoad(0, sum(len(p) for p in paths))
    loaded = skipped = 0
    for path in paths:
        hashes = [b.seq_hash for b in path]
        cached, _ = pool.lookup(hashes)
        table = BlockTable(len(path))
        if not pool.allocate(table, len(path), hashes[:cached]):
            skipped += len(path) - cached
            continue
        pool.finalize(table, len(path), hashes, [b.local_hash for b in path])
        pool.release(table)
        loaded += len(path) - cached
    events = pool.drain_events()
    pool.discard_events()
    return WarmLoad(loaded, skipped, events)


__all__ = ["FORMATS", "CachedBlocks", "WarmBlock", "WarmLoad", "WarmPath", "preload_pool"]
