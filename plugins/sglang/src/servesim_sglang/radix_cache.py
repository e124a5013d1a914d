"""SGLang's radix-tree KV cache, token-granular with a page size.

Model (SGLang ``mem_cache/radix_cache.py``; dynamo-mocker.md §5, aisimulate-engine.md §3):

* A compressed radix tree: each edge holds a run of tokens whose length is a multiple of
  ``page_size``; children are keyed by their edge's first page. Matching and eviction work on
  token content only (no hashing on the hot path).
* A page pool of ``total_tokens // page_size`` pages. A request holds a :class:`KvLease`: a lock
  on the deepest tree node of its cached prefix plus private pages for tokens not (yet) in the
  tree. Locks count walk-to-root: a node with ``lock > 0`` is *protected*; unlocked tokens are
  *evictable*. ``available + evictable`` is what admission may still use.
* Eviction pops the least-recently-used unlocked leaf; when fewer pages are needed than the
  leaf holds only its newest tail pages go, as in the reference. Parents that become unlocked
  leaves join the candidates. Recency is a logical clock bumped once per tree operation (the
  reference uses wall-clock instants; a counter gives the same order and is deterministic).
* Inserting a request's page-aligned prefix extends the request's own locked leaf in place,
  creates a child, or — where another request already cached the same pages — adopts the
  tree's pages and frees the request's duplicates.

KV events (only when enabled; hashes are computed lazily at insertion, never for matching):
a page of ``page_size`` tokens is one block, hashed exactly as core's block pool hashes a block
(:mod:`servesim.kv.hashing`: local hash of the page's tokens, chained sequence hash), so a
router indexes SGLang and vLLM ranks alike. Mapping from radix nodes to events:

* pages that **enter the tree** (leaf extension or new child) → one ``StoredBlocks`` per
  insertion, ``parent_hash`` = sequence hash of the page just before them (None at the root),
  blocks in sequence order;
* pages **evicted from the tree** → one ``RemovedBlocks`` per eviction call, listing every
  evicted page's sequence hash; the last physical copy goes, since the tree keeps one copy;
* a request's private pages (a partial tail page, or duplicates freed when adopting the tree's
  copy) never appear in events — the same blocks were stored by whoever cached them first.
  Node splits emit nothing (the pages stay).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from servesim._compiled import mypyc_attr
from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.kv.hashing import chain_hash, local_block_hash, repeated_token_hash


class RadixNode:
    """One compressed edge. ``hashes`` holds one sequence hash per page (events only)."""

    __slots__ = ("key", "children", "parent", "lock", "stamp", "uid", "hashes", "alive")

    def __init__(self, key: list[int], parent: RadixNode | None, stamp: int, uid: int) -> None:
        self.key = key
        self.children: dict[object, RadixNode] = {}
        self.parent = parent
        self.lock = 0
        self.stamp = stamp
        self.uid = uid
        self.hashes: list[int] | None = None
        self.alive = True


class KvLease:
    """A request's KV: ``node`` (locked, covers ``cached`` tokens) and ``pages`` referenced.

    ``touch`` is the tick of the lease's latest in-place leaf extension, whose recency update
    of the locked path is deferred until the lock is released (see :meth:`RadixCache.cache_prefix`).
    ``prompt_len`` tells a record eviction policy which cached pages hold generated tokens.
    """

    __slots__ = ("node", "cached", "pages", "touch", "prompt_len")

    def __init__(self, node: RadixNode, cached: int, pages: int, prompt_len: int = 0) -> None:
        self.node = node
        self.cached = cached
        self.pages = pages
        self.touch = 0
        self.prompt_len = prompt_len


@mypyc_attr(allow_interpreted_subclasses=True)
class RadixCache:
    #: True for a tree driving a record eviction policy, which needs the per-pass time that
    #: only stepping gives: its rank declines runs of passes (servesim_sglang.radix_records).
    steps_only = False

    def __init__(
        self,
        total_tokens: int,
        page_size: int,
        *,
        enable_prefix_caching: bool = True,
        emit_kv_events: bool = False,
        emit_token_ids: bool = False,
        dp_rank: int = 0,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        self.page_size = page_size
        self.total_pages = total_tokens // page_size
        self.free_pages = self.total_pages
        self.evictable_size = 0
        self.protected_size = 0
        self.caching = enable_prefix_caching
        self.emit = emit_kv_events
        self.emit_token_ids = emit_token_ids
        self.dp_rank = dp_rank
        # Simulated start of the current pass, set by the scheduler (read by record policies).
        self.now = 0.0
        self.events: list[KvEvent] = []
        self._event_id = 0
        self.clock = 0
        self._uid = 0
        self._heap: list[tuple[int, int, RadixNode]] = []
        self.root = RadixNode([], None, 0, 0)
        self.root.hashes = []
        # Bumped whenever a lease gives pages back: a "capacity generation" for retrying
        # handoff reservations only when something was freed (servesim.mechanics.handoff).
        self.releases = 0
        # SGLang's tree frees a whole leaf per eviction step (engine.sglang.evict_whole_leaves).
        self.evict_whole_leaves = False
        # SGLang's recency: a split refreshes both parts, a match stamps its path at its end
        # (engine.sglang.split_refreshes_recency).
        self.sglang_recency = False
        # SGLang's insert hangs new tokens below a leaf as a child node instead of extending
        # the leaf (engine.sglang.child_per_insert).
        self.child_per_insert = False

    # -- accounting ---------------------------------------------------------------------

    @property
    def total_tokens(self) -> int:
        return self.total_pages * self.page_size

    @property
    def available_tokens(self) -> int:
        return self.free_pages * self.page_size

    @property
    def used_pages(self) -> int:
        return self.total_pages - self.free_pages

    def drain_events(self) -> list[KvEvent]:
        out, self.events = self.events, []
        return out

    def discard_events(self) -> None:
        """Drop the events published so far and number the next one 0 (a warm start's
        preload, servesim_sglang.warm_start)."""
        self.events = []
        self._event_id = 0

    # -- matching -------------------------------------------------------------------------

    def child_key(self, tokens: Sequence[int], off: int) -> object:
        if self.page_size == 1:
            return tokens[off]
        return tuple(tokens[off : off + self.page_size])

    def common_len(self, edge: list[int], tokens: Sequence[int], off: int, end: int) -> int:
        """Tokens (whole pages) that ``edge`` shares with ``tokens[off:end]``.

        Gallops over doubling spans with C-speed slice comparisons, then bisects the span
        holding the first mismatch: O(match) element work, not O(edge) per probe.
        """
        n = min(len(edge), end - off)
        lo, step = 0, 64
        while lo < n:
            hi = min(n, lo + step)
            if tokens[off + lo : off + hi] != edge[lo:hi]:
                while hi - lo > 1:  # invariant: [0, lo) equal, [0, hi) not
                    mid = (lo + hi) // 2
                    if tokens[off + lo : off + mid] == edge[lo:mid]:
                        lo = mid
                    else:
                        hi = mid
                break
            lo = hi
            step *= 2
        return lo - lo % self.page_size

    def match_len(self, tokens: Sequence[int], limit: int) -> int:
        """Read-only: cached tokens of the longest page-aligned prefix of ``tokens[:limit]``."""
        if not self.caching:
            return 0
        end = limit - limit % self.page_size
        cur, off = self.root, 0
        while off < end:
            child = cur.children.get(self.child_key(tokens, off))
            if child is None:
                break
            common = self.common_len(child.key, tokens, off, end)
            off += common
            if common < len(child.key):
                break
            cur = child
        return off

    def _match_and_lock(self, tokens: Sequence[int], limit: int) -> tuple[int, RadixNode]:
        off, cur = self.touch_match(tokens, limit)
        self.lock(cur)
        return off, cur

    def touch_match(self, tokens: Sequence[int], limit: int) -> tuple[int, RadixNode]:
        """Match (splitting the edge the match ends in) and refresh the path's recency."""
        if not self.caching:
            return 0, self.root
        end = limit - limit % self.page_size
        late = self.sglang_recency
        stamp = 0 if late else self._tick()
        cur, off = self.root, 0
        while off < end:
            child = cur.children.get(self.child_key(tokens, off))
            if child is None:
                break
            common = self.common_len(child.key, tokens, off, end)
            off += common
            if common < len(child.key):
                cur = self._split(child, common)  # keeps its inherited recency
                break
            cur = child
            if not late:
                self._touch(cur, stamp)
        if late:  # SGLang stamps the matched path when the match ends, split nodes included
            self._touch_path(cur, self._tick())
        return off, cur

    def split_at(self, tokens: Sequence[int], at: int) -> None:
        """Walk the cached path of ``tokens[:at]`` (page-floored) as an insert of it does,
        touching each node, and split the edge it ends in (``prompt_boundary_split``)."""
        end = at - at % self.page_size
        if not self.caching or end <= 0:
            return
        stamp = self._tick()
        cur, off = self.root, 0
        while off < end:
            child = cur.children.get(self.child_key(tokens, off))
            if child is None:
                return
            self._touch(child, stamp)
            common = self.common_len(child.key, tokens, off, end)
            off += common
            if common < len(child.key):
                self._split(child, common)
                return
            cur = child

    # -- locks ----------------------------------------------------------------------------

    def lock(self, node: RadixNode) -> None:
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            if cur.lock == 0:
                n = len(cur.key)
                self.evictable_size -= n
                self.protected_size += n
            cur.lock += 1
            cur = cur.parent

    def unlock(self, node: RadixNode) -> None:
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            if cur.lock <= 0:
                raise AssertionError("radix unlock of an unlocked node")
            cur.lock -= 1
            if cur.lock == 0:
                n = len(cur.key)
                self.protected_size -= n
                self.evictable_size += n
                self._push(cur)
            cur = cur.parent

    # -- recency and eviction candidates ---------------------------------------------------

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _push(self, node: RadixNode) -> None:
        if node.lock == 0 and not node.children and node.alive and node is not self.root:
            heapq.heappush(self._heap, (node.stamp, node.uid, node))

    def _touch(self, node: RadixNode, stamp: int) -> None:
        node.stamp = stamp
        self._push(node)

    def _touch_path(self, node: RadixNode, stamp: int) -> None:
        cur: RadixNode | None = node
        while cur is not None and cur is not self.root:
            self._touch(cur, stamp)
            cur = cur.parent

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` (whole pages) from unlocked leaves, LRU first."""
        ps = self.page_size
        evicted = 0
        removed: list[int] = []
        heap = self._heap
        while evicted < num_tokens and heap:
            stamp, _, node = heapq.heappop(heap)
            if not node.alive or node.lock or node.children or node.stamp != stamp:
                continue
            pages = len(node.key) // ps
            need = -(-(num_tokens - evicted) // ps)
            if need < pages and not self.evict_whole_leaves:  # only the newest tail pages
                cut = (pages - need) * ps
                del node.key[cut:]
                if node.hashes is not None:
                    removed.extend(node.hashes[pages - need :])
                    del node.hashes[pages - need :]
                self._free_evicted(need * ps)
                evicted += need * ps
                self._push(node)
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[self.child_key(node.key, 0)]
            node.alive = False
            if node.hashes is not None:
                removed.extend(node.hashes)
            self._free_evicted(len(node.key))
            evicted += len(node.key)
            self._push(parent)
        if removed and self.emit:
            self._event(RemovedBlocks(tuple(removed)))
        if len(heap) > 64 and len(heap) > 8 * (self._uid + 1):
            self._compact_heap()
        return evicted

    def _free_evicted(self, tokens: int) -> None:
        self.evictable_size -= tokens
        self.free_pages += tokens // self.page_size

    def _compact_heap(self) -> None:
        self._heap = [
            e for e in self._heap if e[2].alive and not e[2].lock and not e[2].children and e[2].stamp == e[0]
        ]
        heapq.heapify(self._heap)

    # -- insertion ------------------------------------------------------------------------

    def _new_node(self, key: list[int], parent: RadixNode, stamp: int) -> RadixNode:
        self._uid += 1
        return RadixNode(key, parent, stamp, self._uid)

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Cut ``child``'s edge after ``at`` tokens; the new upper node inherits its state."""
        parent = child.parent
        assert parent is not None
        upper = self._new_node(child.key[:at], parent, child.stamp)
        if self.sglang_recency:  # SGLang's _split_node: both parts count as just used
            upper.stamp = self._tick()
            child.stamp = self._tick()
            self._push(child)
        upper.lock = child.lock
        if child.hashes is not None:
            pages = at // self.page_size
            upper.hashes = child.hashes[:pages]
            child.hashes = child.hashes[pages:]
        child.key = child.key[at:]
        child.parent = upper
        parent.children[self.child_key(upper.key, 0)] = upper
        upper.children[self.child_key(child.key, 0)] = child
        return upper

    def insert(self, start: RadixNode, tokens: Sequence[int], begin: int, end: int) -> tuple[RadixNode, int]:
        """Insert ``tokens[begin:end]`` below ``start`` (whose path covers ``tokens[:begin]``).

        Returns the deepest node of the inserted path and how many of those tokens were already
        cached by someone else (the caller frees its duplicate pages).
        """
        if end <= begin:
            return start, 0
        stamp = self._tick()
        self._touch_path(start, stamp)
        cur, off, dup = start, begin, 0
        while off < end:
            extendable = (
                cur is not self.root
                and not self.child_per_insert
                and not cur.children
                and (cur.lock == 0 or (cur is start and cur.lock == 1))
            )
            if extendable:
                self._extend_leaf(cur, tokens, off, end, stamp)
                return cur, dup
            child = cur.children.get(self.child_key(tokens, off))
            if child is None:
                return self._create_child(cur, tokens, off, end, stamp), dup
            common = self.common_len(child.key, tokens, off, end)
            off += common
            dup += common
            if common == len(child.key):
                cur = child
                self._touch(cur, stamp)
                continue
            upper = self._split(child, common)
            if off < end:
                return self._create_child(upper, tokens, off, end, stamp), dup
            return upper, dup
        return cur, dup

    def _extend_leaf(self, node: RadixNode, tokens: Sequence[int], off: int, end: int, stamp: int) -> None:
        parent_hash = node.hashes[-1] if node.hashes else None
        node.key.extend(tokens[off:end])
        node.stamp = stamp
        if node.lock == 0:
            self.evictable_size += end - off
            self._push(node)
        else:
            self.protected_size += end - off
        if self.emit:
            new = self._store(parent_hash, tokens, off, end)
            assert node.hashes is not None
            node.hashes.extend(new)

    def _create_child(
        self, parent: RadixNode, tokens: Sequence[int], off: int, end: int, stamp: int
    ) -> RadixNode:
        node = self._new_node(list(tokens[off:end]), parent, stamp)
        parent.children[self.child_key(tokens, off)] = node
        self.evictable_size += end - off
        self._push(node)
        if self.emit:
            node.hashes = self._store(parent.hashes[-1] if parent.hashes else None, tokens, off, end)
        return node

    # -- KV events -------------------------------------------------------------------------

    def _event(self, data: StoredBlocks | RemovedBlocks) -> None:
        self.events.append(KvEvent(self._event_id, self.dp_rank, data))
        self._event_id += 1

    def _store(self, parent: int | None, tokens: Sequence[int], off: int, end: int) -> list[int]:
        """Publish one Stored event for the pages ``tokens[off:end]``; return their hashes."""
        ps = self.page_size
        seq: list[int] = []
        blocks = []
        h = parent
        for p in range(off, end, ps):
            page = tokens[p : p + ps]
            local = repeated_token_hash(page[0], 1) if ps == 1 else local_block_hash(page)
            h = chain_hash(h, local)
            seq.append(h)
            ids = tuple(page) if self.emit_token_ids else None
            blocks.append(KvBlock(block_hash=h, tokens_hash=local, token_ids=ids))
        self._event(StoredBlocks(parent_hash=parent, blocks=tuple(blocks)))
        return seq

    # -- request leases -------------------------------------------------------------------

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def acquire(self, tokens: Sequence[int], limit: int, target: int,
                prompt_len: int = 0) -> tuple[KvLease, int] | None:
        """Match (at most ``limit`` tokens), lock, evict if needed, then take pages so the
        request owns KV for ``target`` tokens. None (nothing changed) when it cannot fit."""
        prefix, node = self._match_and_lock(tokens, limit)
        need = self.pages_for(target) - prefix // self.page_size
        if not self._make_room(need):
            self.unlock(node)
            return None
        self.free_pages -= need
        return KvLease(node, prefix, prefix // self.page_size + need, prompt_len), prefix

    def _make_room(self, pages: int) -> bool:
        tokens = pages * self.page_size
        if tokens > self.available_tokens + self.evictable_size:
            return False
        if tokens > self.available_tokens:
            self.evict(tokens - self.available_tokens)
        return self.free_pages >= pages

    def extend(self, lease: KvLease, target: int) -> bool:
        """Grow a lease to cover ``target`` tokens (chunk continuation)."""
        need = max(0, self.pages_for(target) - lease.pages)
        if not self._make_room(need):
            return False
        self.free_pages -= need
        lease.pages += need
        return True

    def grow(self, lease: KvLease, pages: int) -> None:
        """Hand ``pages`` already-reserved free pages to a lease (decode growth)."""
        self.free_pages -= pages
        lease.pages += pages

    def cache_prefix(self, lease: KvLease, tokens: Sequence[int], upto: int) -> None:
        """Insert the lease's page-aligned ``tokens[:upto]`` and move its lock to the new end.

        Fast path (every decode page): when the lease's node is a leaf only this lease locks,
        the pages extend it in place, as :meth:`insert` would. The recency touch of the path
        is deferred to the lease's release: every node on it is locked by this lease until
        then, so nothing can evict it or observe its recency before the touch lands, and
        applying the latest tick then (keeping any newer one) yields the same recency as
        touching it at every step.
        """
        complete = upto - upto % self.page_size
        if not self.caching or complete <= lease.cached:
            return
        node = lease.node
        if node.lock == 1 and not node.children and node is not self.root and not self.child_per_insert:
            begin = lease.cached
            lease.touch = self._tick()
            node.stamp = lease.touch
            parent_hash = node.hashes[-1] if node.hashes else None
            node.key.extend(tokens[begin:complete])
            self.protected_size += complete - begin
            if self.emit:
                assert node.hashes is not None
                node.hashes.extend(self._store(parent_hash, tokens, begin, complete))
            lease.cached = complete
            return
        node, dup = self.insert(lease.node, tokens, lease.cached, complete)
        if node is not lease.node:
            self.lock(node)
            self.unlock(lease.node)
            lease.node = node
        self.free_pages += dup // self.page_size
        lease.cached = complete

    def finish(self, lease: KvLease, tokens: Sequence[int], upto: int) -> None:
        """Cache ``floor_to_page(upto)`` tokens, free the rest of the lease and unlock it."""
        self.releases += 1
        complete = upto - upto % self.page_size if self.caching else 0
        complete = max(complete, lease.cached)
        self.free_pages += lease.pages - complete // self.page_size
        self._apply_touch(lease)
        if self.sglang_recency:  # SGLang inserts the whole sequence: its path is touched
            self._touch_path(lease.node, self._tick())
        node, dup = self.insert(lease.node, tokens, lease.cached, complete)
        self.free_pages += dup // self.page_size
        self.unlock(lease.node)
        lease.pages = 0

    def release(self, lease: KvLease) -> None:
        """Retraction/abort: free the private pages; the cached prefix stays, unlocked."""
        self.releases += 1
        self.free_pages += lease.pages - lease.cached // self.page_size
        self._apply_touch(lease)
        self.unlock(lease.node)
        lease.pages = 0

    def _apply_touch(self, lease: KvLease) -> None:
        """Land a deferred recency touch on the lease's (still locked) path, keeping newer ones."""
        stamp = lease.touch
        if not stamp:
            return
        lease.touch = 0
        cur: RadixNode | None = lease.node
        while cur is not None and cur is not self.root:
            if cur.stamp < stamp:
                cur.stamp = stamp
            cur = cur.parent

    # -- two-phase admission (servesim_sglang.admission) -------------------------------------

    def lock_prefix(self, tokens: Sequence[int], limit: int) -> tuple[int, RadixNode]:
        """Match at most ``limit`` tokens and lock the match, allocating nothing (SGLang
        locks every admitted prefix before the batch's KV is allocated)."""
        return self._match_and_lock(tokens, limit)

    def take_pages(self, node: RadixNode, prefix: int, target: int) -> KvLease:
        """A lease on the locked ``node`` owning KV for ``target`` tokens; the free pages
        must be there already (the caller evicted for the whole batch)."""
        need = self.pages_for(target) - prefix // self.page_size
        self.free_pages -= need
        return KvLease(node, prefix, prefix // self.page_size + need)
