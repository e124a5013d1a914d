"""The radix cache driving a record eviction policy (servesim.kv.eviction).

:class:`RecordRadixCache` is SGLang's radix tree (:mod:`servesim_sglang.radix_cache`) whose
evictable units are **leaf pages**: the last page of every unlocked leaf node. Each one is
offered to the policy as an :class:`~servesim.kv.eviction.EvictableBlock` (the page's chained
hash, the hash of the page before it, its page index in the sequence, ``page_size`` tokens,
the node's hit count and last access time); evicting one drops that page, and the page
before it (or the parent node, once the leaf is empty and the parent has no other child)
becomes the next unit. That is SGLang's ``evict``, which pops leaves from a heap ordered by
``EvictionStrategy.get_priority`` (``mem_cache/radix_cache.py``, ``evict_policy.py``), taken
one page at a time so that a policy can weigh each page.

A node's hit count counts the requests that matched it (SGLang 0.5.23 counts the inserts that
pass through it, ``_inc_hit_count``: the same requests once they cache their tokens, plus the
creator); a split's upper node inherits it, as in SGLang's ``_split_node``. Hashes are
computed for every page (the records carry them) and KV events are published only when
enabled. The built-in ``lru`` keeps the plain tree's own heap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract import KvEvent, RemovedBlocks, StoredBlocks
from servesim.kv.eviction import EvictableBlock, RecordEvictionPolicy

from servesim_sglang.radix_cache import KvLease, RadixCache, RadixNode


class RecordRadixCache(RadixCache):
    """A :class:`RadixCache` whose leaf pages are ordered by ``policy``."""

    steps_only = True

    def __init__(self, total_tokens: int, page_size: int, *, policy: RecordEvictionPolicy,
                 emit_kv_events: bool = False, **kwargs: Any) -> None:
        super().__init__(total_tokens, page_size, emit_kv_events=True, **kwargs)
        self.publish = emit_kv_events
        self.policy = policy
        self._units: dict[int, RadixNode] = {}  # unit id -> node whose last page it is
        self._unit_of: dict[RadixNode, EvictableBlock] = {}
        self._hits: dict[RadixNode, int] = {}
        self._access: dict[RadixNode, float] = {}
        self._prompt_end: dict[RadixNode, int] = {}  # prompt tokens at the node's start
        self._prompt_len = 0  # of the lease being cached
        self._prompt_end_next = _UNKNOWN  # for the node being created
        self._next_unit = 0

    # -- units ------------------------------------------------------------------------------

    def _record(self, node: RadixNode) -> EvictableBlock:
        ps = self.page_size
        hashes = node.hashes or []
        parent = node.parent
        if len(hashes) >= 2:
            parent_hash: int | None = hashes[-2]
        else:
            parent_hash = parent.hashes[-1] if parent is not None and parent.hashes else None
        depth = 0
        cur: RadixNode | None = node
        while cur is not None:
            depth += len(cur.key)
            cur = cur.parent
        self._next_unit += 1
        return EvictableBlock(
            self._next_unit, hashes[-1] if hashes else None, parent_hash, depth // ps - 1, ps,
            ref_count=node.lock, hit_count=self._hits.get(node, 0),
            last_access_ms=self._access.get(node, self.now),
            generated=len(node.key) > self._prompt_end.get(node, len(node.key)), tier=0,
        )

    def _offer(self, node: RadixNode) -> None:
        rec = self._record(node)
        self._units[rec.block_id] = node
        self._unit_of[node] = rec
        self.policy.insert(rec, self.now)

    def _withdraw(self, node: RadixNode) -> None:
        rec = self._unit_of.pop(node, None)
        if rec is not None:
            del self._units[rec.block_id]
            self.policy.remove(rec, self.now)

    def _push(self, node: RadixNode) -> None:
        if node.lock == 0 and not node.children and node.alive and node is not self.root \
                and node.key and node not in self._unit_of:
            self._offer(node)

    def _touch(self, node: RadixNode, stamp: int) -> None:
        self._withdraw(node)  # its access time changes: offered again below if still a leaf
        self._access[node] = self.now
        super()._touch(node, stamp)

    def lock(self, node: RadixNode) -> None:
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            if cur.lock == 0:
                self._withdraw(cur)
            cur = cur.parent
        super().lock(node)

    # -- structure changes ------------------------------------------------------------------

    def _match_and_lock(self, tokens: Sequence[int], limit: int) -> tuple[int, RadixNode]:
        off, cur = super()._match_and_lock(tokens, limit)
        node: RadixNode | None = cur
        while node is not None and node is not self.root:
            self._hits[node] = self._hits.get(node, 0) + 1
            if node.lock > 1:  # another request holds it too: a hit on a unit in use
                self.policy.hit(self._record(node), self.now)
            node = node.parent
        return off, cur

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        upper = super()._split(child, at)
        self._hits[upper] = self._hits.get(child, 0)
        self._access[upper] = self._access.get(child, self.now)
        pe = self._prompt_end.get(child, _UNKNOWN)
        self._prompt_end[upper] = pe
        self._prompt_end[child] = pe - at
        return upper

    def _extend_leaf(self, node: RadixNode, tokens: Sequence[int], off: int, end: int,
                     stamp: int) -> None:
        self._withdraw(node)
        self._access[node] = self.now
        super()._extend_leaf(node, tokens, off, end, stamp)

    def _create_child(self, parent: RadixNode, tokens: Sequence[int], off: int, end: int,
                      stamp: int) -> RadixNode:
        self._withdraw(parent)
        self._prompt_end_next = self._prompt_len - off
        return super()._create_child(parent, tokens, off, end, stamp)

    def _new_node(self, key: list[int], parent: RadixNode, stamp: int) -> RadixNode:
        node = super()._new_node(key, parent, stamp)
        self._access[node] = self.now
        self._prompt_end[node] = self._prompt_end_next
        self._prompt_end_next = _UNKNOWN
        return node

    def cache_prefix(self, lease: KvLease, tokens: Sequence[int], upto: int) -> None:
        self._prompt_len = lease.prompt_len
        super().cache_prefix(lease, tokens, upto)

    def finish(self, lease: KvLease, tokens: Sequence[int], upto: int) -> None:
        self._prompt_len = lease.prompt_len
        super().finish(lease, tokens, upto)

    def _apply_touch(self, lease: KvLease) -> None:
        # The lease's path is used until now (released, or cached and released).
        cur: RadixNode | None = lease.node
        while cur is not None and cur is not self.root:
            self._access[cur] = self.now
            cur = cur.parent
        super()._apply_touch(lease)

    # -- eviction ---------------------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` (whole pages), one leaf page per policy choice."""
        ps = self.page_size
        policy = self.policy
        evicted = 0
        removed: list[int] = []
        while evicted < num_tokens and len(policy):
            rec = policy.evict(self.now)
            node = self._units.pop(getattr(rec, "block_id", -1), None)
            if node is None or self._unit_of.get(node) is not rec:
                raise RuntimeError(
                    f"eviction policy {type(policy).__name__} evicted {rec!r}, which is not one "
                    "of the evictable pages it was given"
                )
            del self._unit_of[node]
            self._drop_last_page(node, removed)
            evicted += ps
        if removed and self.publish:
            self._event(RemovedBlocks(tuple(removed)))
        return evicted

    def _drop_last_page(self, node: RadixNode, removed: list[int]) -> None:
        ps = self.page_size
        if node.hashes:
            removed.append(node.hashes.pop())
        self._free_evicted(ps)
        if len(node.key) > ps:
            del node.key[-ps:]
            self._offer(node)
            return
        parent = node.parent
        assert parent is not None
        del parent.children[self.child_key(node.key, 0)]
        node.alive = False
        for table in (self._hits, self._access, self._prompt_end):
            table.pop(node, None)
        self._push(parent)

    def _event(self, data: StoredBlocks | RemovedBlocks) -> None:
        if self.publish:
            super()._event(data)

    def drain_events(self) -> list[KvEvent]:
        return super().drain_events() if self.publish else []


#: Prompt tokens of a node whose creator is unknown: all prompt.
_UNKNOWN = 1 << 62


def make_radix_cache(total_tokens: int, page_size: int, *, eviction: Any, **kwargs: Any) -> RadixCache:
    """The tree for ``eviction``: :class:`RecordRadixCache` for a record policy, the plain tree
    (SGLang's own LRU heap) for the built-in ``lru``."""
    if getattr(eviction, "uses_records", False):
        return RecordRadixCache(total_tokens, page_size, policy=eviction, **kwargs)
    return RadixCache(total_tokens, page_size, **kwargs)


__all__ = ["RecordRadixCache", "make_radix_cache"]
