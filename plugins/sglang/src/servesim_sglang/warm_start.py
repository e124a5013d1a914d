"""A warm start for the SGLang rank (servesim.rank.WarmCache): the paths of a captured cache
(servesim.kv.warm_start) inserted into the radix tree, as if a request had computed each
path's tokens and finished, so they stay as unlocked, evictable pages. The tree is keyed by
tokens, so a path is loaded only when the capture has its token ids (vLLM's wire format
always does; servesim's JSONL with ``sinks`` ``emit_kv_token_ids``); the others are skipped.
The events the tree publishes while it loads are handed back for the KV router
(servesim.kv.warm_start.WarmLoad) and the next event is numbered 0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from servesim.kv.warm_start import WarmLoad

if TYPE_CHECKING:
    from servesim.kv.warm_start import WarmPath

    from servesim_sglang.radix_cache import RadixCache


def preload_radix(cache: RadixCache, paths: Sequence[WarmPath]) -> WarmLoad:
    """Pages loaded and skipped, and the events published meanwhile."""
    if not cache.caching:
        return WarmLoad(0, sum(len(p) for p in paths))
    loaded = skipped = 0
    for path in paths:
        if any(b.tokens is None or len(b.tokens) != cache.page_size for b in path):
            skipped += len(path)
            continue
        tokens = [t for b in path for t in b.tokens]  # type: ignore[union-attr]
        got = cache.acquire(tokens, len(tokens), len(tokens))
        if got is None:
            skipped += len(path)
            continue
        lease, prefix = got
        cache.finish(lease, tokens, len(tokens))
        loaded += len(path) - prefix // cache.page_size
    events = cache.drain_events()
    cache.discard_events()
    return WarmLoad(loaded, skipped, events)


__all__ = ["preload_radix"]
