"""A paged KV block pool with prefix caching, reference counts and KV events.

Backend-neutral: vLLM-style and TRT-LLM-style ranks both keep one :class:`BlockPool` per
rank and one :class:`BlockTable` per request. The model follows dynamo-mocker.md §3:

* **Identity.** A full block is named by its chained sequence hash (§3.1,
  :mod:`servesim.kv.hashing`). A block the request is still filling (or one whose hash the
  caller never publishes) is *private*: it can never be shared.
* **Copies.** A hash may have several physical copies (two requests computed the same block
  before either was cache-visible, or the prefix-recompute rule recomputed a cached block).
  Lookups use the oldest resident copy (the *primary*). ``Stored`` is published when a hash
  becomes visible (0 → 1 copies) and ``Removed`` only when its last copy is evicted (§3.3,
  aisimulate-engine.md §4.6), so an index that applies the events holds exactly the set of
  cached hashes.
* **Reference counts.** A cached block whose count drops to 0 moves to the inactive pool,
  ordered by an injected :class:`~servesim.kv.eviction.EvictionPolicy`; a private block goes
  straight back to the free list. Releasing walks a table tail first, so with LRU a
  sequence's leaf blocks are evicted before its root blocks.
* **Allocation** is all or nothing (§3.3): free blocks are used first and inactive blocks
  are evicted only for the shortfall; on failure nothing changes. Evictions publish their
  ``Removed`` events before the ``Stored`` batch of the same operation (§3.4).
* **Finalisation.** Blocks become cache-visible only when the caller finalises them, i.e.
  when the computed boundary passes their end (§3.3, vLLM's ``cache_full_blocks``). Newly
  visible blocks are published as ``Stored`` batches of contiguous runs, each with the
  sequence hash of the block before the run as ``parent_hash``.

With prefix caching off nothing is ever hashed, shared or published (§3.4 rule 5). Every
operation costs time proportional to the blocks it touches, never to the pool size, and the
replay's hot paths do that per-block work in as few Python-level passes as they can: while no
block is referenced twice, a release hands the table's cached head to the eviction policy and
its private tail to the free list as two reversed slices (no per-block branching); the LRU
queues whole released tables (:class:`~servesim.kv.eviction.LruEviction`); finalising a range
registers it with one C-level map; event objects come from :mod:`servesim.kv.event_build`.
``tests/kv/kv_reference_pool.py`` is the plain per-block model these must match exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from servesim._compiled import mypyc_attr
from servesim.contract import KvEvent, RemovedBlocks, StoredBlocks
from servesim.kv.event_build import (
    kv_block,
    kv_blocks,
    kv_event,
    removed_blocks,
    removed_events,
    stored_blocks,
)
from servesim.kv.event_records import ALL_SHARED, RemovedRun, StoredRun
from servesim.kv.eviction import EvictionPolicy, LruEviction


class BlockTable:
    """One request's physical blocks, in sequence order.

    ``ids[:num_cached]`` are cache-visible (hashed); the rest are private to the request.
    Owned by the request, mutated only through :class:`BlockPool`. ``prompt_len`` (set by the
    request's owner) tells a record eviction policy which blocks hold generated tokens.
    ``shared`` (set by the owner, default: all): only blocks ``0 .. shared-1`` can hold
    tokens another request's prompt may hold; the ``Stored`` records of the others are marked
    as no prompt's match (:attr:`servesim.kv.event_records.StoredRun.shared`).
    """

    __slots__ = ("ids", "num_cached", "prompt_len", "shared", "lora", "lora_name")

    def __init__(self, prompt_len: int = 0) -> None:
        self.ids: list[int] = []
        self.num_cached = 0
        self.prompt_len = prompt_len
        self.shared = ALL_SHARED
        # The owner's LoRA adapter id (0: base model) and name, carried by its Stored events
        # (vLLM's BlockStored.lora_id and lora_name).
        self.lora = 0
        self.lora_name: str | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"BlockTable(blocks={len(self.ids)}, cached={self.num_cached})"


@mypyc_attr(allow_interpreted_subclasses=True)
class BlockPool:
    """``num_blocks`` physical blocks shared by the requests of one rank."""

    #: True for a pool that keeps records for a record eviction policy, which needs the
    #: per-pass time that only stepping gives: its rank declines runs of passes.
    steps_only = False

    def __init__(
        self,
        num_blocks: int,
        *,
        eviction: EvictionPolicy | None = None,
        enable_prefix_caching: bool = True,
        emit_events: bool = False,
        dp_rank: int = 0,
    ) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be > 0, got {num_blocks}")
        self.capacity = num_blocks
        self.prefix_caching = enable_prefix_caching
        # Simulated start of the current pass, set by the rank; only a record eviction
        # policy reads it (servesim.kv.eviction_records).
        self.now = 0.0
        self.dp_rank = dp_rank
        self._evict = eviction if eviction is not None else LruEviction()
        # Pop from the end: block 0 is handed out first, which keeps traces readable.
        self._free: list[int] = _block_ids(num_blocks)[::-1]
        self._ref: list[int] = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._primary: dict[int, int] = {}
        self._dups: dict[int, list[int]] = {}
        # Blocks referenced more than once. While there are none, releasing a table needs no
        # per-block reference arithmetic (every count is 1): see :meth:`release`.
        self._shared = 0
        self._push_many = self._evict.push_many
        if type(self._evict) is LruEviction:
            # The built-in LRU leaves forgetting its victims to the eviction loop, which
            # walks them anyway (one loop instead of two).
            self._evict.reserve(num_blocks)
            self._pop_many = self._evict.pop_unmarked
            self._unmark: list[list[int] | None] = self._evict.entry_batch
        else:
            self._pop_many = self._evict.pop_many
            self._unmark = [None] * num_blocks
        # len(self._evict), kept here because occupancy is read every pass (the pool makes
        # every push, removal and eviction, so the two never differ).
        self._inactive = len(self._evict)
        # KvEvent objects, or with ``event_records`` also compact records of them.
        self._events: list[Any] | None = [] if (emit_events and enable_prefix_caching) else None
        self._next_event_id = 0
        # Set when the only consumer of the events is an index of cached hashes (the KV
        # router, servesim.fast.event_readers.EventReaders.kv_router_only): the evictions of one allocation are
        # then published as one ``Removed`` event instead of one per block. The index ends in
        # the same state; only the event count and ids differ from the per-block stream.
        self.coalesce_removals = False
        # False when that index is all that reads the events and the caller registers blocks
        # nothing can look up under negative placeholder hashes (generated pseudo tokens,
        # hashed lazily): such blocks then publish no events at all. A placeholder re-keyed
        # to its real hash (:meth:`rekey`) is still unpublished; its eventual ``Removed``
        # names a hash the index never held, which the index ignores.
        self.events_for_placeholders = True
        # Set when every reader of the events accepts compact records
        # (servesim.kv.event_records, EventReaders.kv_records): device-tier evictions
        # and ``Stored`` events without token ids are then published as records, with the
        # same ids and contents as the objects they stand for.
        self.event_records = False
        # Bumped by every release: a "capacity generation" that lets a caller skip
        # re-probing an allocation that failed when nothing was freed since.
        self.releases = 0

    # -- occupancy ----------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks holding nothing (never cached or private and released)."""
        return len(self._free)

    @property
    def num_inactive(self) -> int:
        """Cached blocks no request references: reusable as prefix, evictable."""
        return self._inactive

    @property
    def num_active(self) -> int:
        """Blocks referenced by at least one request."""
        return self.capacity - len(self._free) - self._inactive

    def refcount(self, block_id: int) -> int:
        return self._ref[block_id]

    def block_hash(self, block_id: int) -> int | None:
        return self._hash[block_id]

    def cached_hashes(self) -> set[int]:
        """Every hash with at least one resident copy (test and debugging aid: O(cache))."""
        return set(self._primary)

    def is_cached(self, seq_hash: int) -> bool:
        return seq_hash in self._primary

    # -- lookup ---------------------------------------------------------------------------

    def lookup(self, seq_hashes: Sequence[int], max_blocks: int | None = None) -> tuple[int, int]:
        """``(cached, active)``: the length of the cached prefix of ``seq_hashes`` (stopping at
        the first miss, at most ``max_blocks``) and how many of those blocks are referenced
        by some request (dynamo-mocker.md §1.6 ``active_cached_tokens``)."""
        if not self.prefix_caching:
            return 0, 0
        primary = self._primary
        ref = self._ref
        limit = len(seq_hashes) if max_blocks is None else min(max_blocks, len(seq_hashes))
        active = 0
        for i in range(limit):
            b = primary.get(seq_hashes[i])
            if b is None:
                return i, active
            if ref[b]:
                active += 1
        return limit, active

    # -- allocation -----------------------------------------------------------------------

    def can_allocate(self, table: BlockTable, target: int, prefix: Sequence[int] = ()) -> bool:
        """Whether :meth:`allocate` with the same arguments would succeed."""
        return self._plan(table, target, prefix) is not None

    def allocate(self, table: BlockTable, target: int, prefix: Sequence[int] = ()) -> bool:
        """Grow ``table`` to ``target`` blocks, all or nothing.

        Positions ``len(table) .. len(prefix)-1`` reuse the cached blocks named by
        ``prefix`` (sequence hashes the caller found with :meth:`lookup` in this same
        operation); the rest are fresh private blocks, taken from the free list first and
        then by evicting inactive blocks. Returns False, changing nothing, when the pool
        cannot supply them.
        """
        ids = table.ids
        free = self._free
        if not prefix:
            # No reuse (decode growth, uncached prompts): no plan to build.
            fresh = target - len(ids)
            if fresh <= 0:
                return True
            if fresh > len(free) and fresh > len(free) + self._inactive:
                return False
        else:
            plan = self._plan(table, target, prefix)
            if plan is None:
                return False
            reuse, fresh = plan
            if reuse:
                self._reuse(ids, prefix, reuse)
                table.num_cached = len(ids)
        # Fresh private blocks: free ones first (from the list's end), then evicted ones.
        ref = self._ref
        if fresh == 1 and free:
            # The id as the list holds it (``Any``: the compiled build then moves the object
            # itself into ``ids`` rather than a new box of it; see _evict_into).
            obj: list[Any] = free
            bo = obj.pop()
            b: int = bo
            ref[b] = 1
            ids.append(bo)
            return True
        take = fresh if fresh < len(free) else len(free)
        if take:
            got = free[-take:]
            del free[-take:]
            got.reverse()
            for b in got:
                ref[b] = 1
            ids += got
        if fresh > take:
            self._evict_into(ids, fresh - take)
        return True

    def _reuse(self, ids: list[int], prefix: Sequence[int], n: int) -> None:
        ref = self._ref
        primary = self._primary
        evict = self._evict
        shared = 0
        for i in range(len(ids), len(ids) + n):
            b = primary[prefix[i]]
            r = ref[b]
            if r == 0:
                evict.remove(b)
                self._inactive -= 1
            elif r == 1:
                shared += 1
            ref[b] = r + 1
            ids.append(b)
        self._shared += shared

    def _evict_into(self, ids: list[int], n: int) -> None:
        """Evict ``n`` inactive blocks, oldest first by the policy, and append them to ``ids``
        with one reference. Each evicted hash whose last copy goes publishes ``Removed``
        (with ``coalesce_removals``: one event for all of them)."""
        victims = self._pop_many(n)
        self._inactive -= n
        ref = self._ref
        # Hashes are read as objects (``Any``) and a missing one is -1 (block ids are never
        # negative): the compiled build then hands each hash object to the dict as it is and
        # compares unboxed ids, where ``int`` locals would box every hash and id again (a heap
        # allocation each, for ids above 256 and nearly every hash) for the dict call and the
        # comparison. The interpreted code does the same operations.
        hashes: list[Any] = self._hash
        events = self._events
        unmark = self._unmark
        if self._dups:
            # Duplicates only ever go away during eviction, so this path stays exact.
            drop = self._drop_copy
            for b in victims:
                h = hashes[b]
                hashes[b] = None
                if h is not None and drop(h, b) and events is not None:
                    if self.event_records:
                        events.append(RemovedRun(self._next_event_id, self.dp_rank, [h]))
                        self._next_event_id += 1
                    else:
                        self.publish_events(removed_blocks((h,)))
                ref[b] = 1
                unmark[b] = None
            ids += victims
            return
        # No duplicate copies: each inactive block is its hash's only (primary) copy.
        primary: dict[Any, int] = self._primary
        pop = primary.pop
        if events is None:
            for b in victims:
                h = hashes[b]
                if h is not None:
                    hashes[b] = None
                    p = pop(h, -1)
                    if p != b and p >= 0:
                        primary[h] = p
                ref[b] = 1
                unmark[b] = None
            ids += victims
            return
        gone: list[int] = []
        for b in victims:
            h = hashes[b]
            if h is not None:
                hashes[b] = None
                p = pop(h, -1)
                if p == b:
                    gone.append(h)
                elif p >= 0:
                    primary[h] = p
            ref[b] = 1
            unmark[b] = None
        ids += victims
        if not gone:
            return
        if not self.coalesce_removals:  # one event per hash, built in one go
            first = self._next_event_id
            self._next_event_id = first + len(gone)
            if self.event_records:
                events.append(RemovedRun(first, self.dp_rank, gone))
            else:
                events.extend(removed_events(first, self.dp_rank, gone))
            return
        if not self.events_for_placeholders and min(gone) < 0:
            gone = [h for h in gone if h >= 0]
            if not gone:
                return
        self.publish_events(removed_blocks(tuple(gone)))

    def _plan(self, table: BlockTable, target: int, prefix: Sequence[int]) -> tuple[int, int] | None:
        have = len(table.ids)
        if target <= have:
            return 0, 0
        reuse = 0
        inactive_hits = 0
        if prefix and self.prefix_caching:
            if table.num_cached != have:
                raise ValueError("cannot reuse cached blocks after private blocks")
            stop = min(len(prefix), target)
            primary = self._primary
            ref = self._ref
            for i in range(have, stop):
                b = primary.get(prefix[i])
                if b is None:
                    raise KeyError(f"prefix block {i} (hash {prefix[i]:#x}) is not cached")
                if ref[b] == 0:
                    inactive_hits += 1
            reuse = max(0, stop - have)
        fresh = target - have - reuse
        if fresh > len(self._free) + self._inactive - inactive_hits:
            return None
        return reuse, fresh

    def _drop_copy(self, h: int, b: int) -> bool:
        """Forget copy ``b`` of hash ``h``; True when it was the last one."""
        dups = self._dups.get(h)
        if self._primary.get(h) == b:
            if dups is None:
                del self._primary[h]
                return True
            self._primary[h] = dups.pop(0)
        elif dups is not None:
            dups.remove(b)
        if dups is not None and not dups:
            del self._dups[h]
        return False

    # -- finalisation ---------------------------------------------------------------------

    def finalize(
        self,
        table: BlockTable,
        upto: int,
        seq_hashes: Sequence[int],
        local_hashes: Sequence[int],
        block_tokens: Callable[[int], Sequence[int]] | None = None,
    ) -> None:
        """Make ``table.ids[num_cached:upto]`` cache-visible under ``seq_hashes[i]``.

        ``local_hashes`` are the token-only hashes carried in ``Stored`` events;
        ``block_tokens(i)``, when given, supplies block i's token ids for them
        (``emit_kv_token_ids``). A hash that already has a resident copy gains a duplicate
        copy and no event.
        """
        if not self.prefix_caching:
            return
        start = table.num_cached
        ids = table.ids
        if upto > len(ids):
            upto = len(ids)
        if upto <= start:
            return
        hashes: list[Any] = self._hash
        if upto - start == 1:  # decode: one block at a time
            # Id and hash as objects, the id also unboxed for indexing (see _evict_into).
            obj: list[Any] = ids
            bo = obj[start]
            b: int = bo
            hs1: Sequence[Any] = seq_hashes
            h = hs1[start]
            table.num_cached = upto
            hashes[b] = h
            primary: dict[Any, Any] = self._primary
            got = primary.setdefault(h, bo)
            if got is bo or got == bo:
                if self._events is not None and (h >= 0 or self.events_for_placeholders):
                    parent = seq_hashes[start - 1] if start > 0 else None
                    if self.event_records and block_tokens is None and not table.lora:
                        self._events.append(StoredRun(self._next_event_id, self.dp_rank, parent,
                                                      (h,), (local_hashes[start],),
                                                      1 if start < table.shared else 0))
                        self._next_event_id += 1
                        return
                    tokens = tuple(block_tokens(start)) if block_tokens is not None else None
                    blk = kv_block(h, local_hashes[start], tokens)
                    self.publish_events(stored_blocks(parent, (blk,), None) if not table.lora
                                        else StoredBlocks(parent, (blk,), lora_id=table.lora,
                                                          lora_name=table.lora_name))
            else:
                self._dups.setdefault(h, []).append(b)
                # A resident copy: no event.
            return
        blocks = ids[start:upto]
        hs: Sequence[Any] = seq_hashes[start:upto]
        if len(hs) != len(blocks):
            raise IndexError(f"finalize up to block {upto} with {len(seq_hashes)} hashes")
        table.num_cached = upto
        for b, h in zip(blocks, hs, strict=True):
            hashes[b] = h
        # setdefault per block, in order, exactly as a loop would: equal to ``blocks`` iff
        # every hash was new (a hash repeated inside the range returns its first block).
        got = list(map(self._primary.setdefault, hs, blocks))
        if got == blocks:
            if self._events is not None:
                self._stored(start, hs, local_hashes, block_tokens, seq_hashes, table.shared,
                             table.lora, table.lora_name)
            return
        dups = self._dups
        run_from = -1  # start of the current run of new hashes, -1 outside one
        for j, b in enumerate(blocks):
            if got[j] == b:
                if run_from < 0:
                    run_from = j
                continue
            dups.setdefault(hs[j], []).append(b)
            if run_from >= 0:
                if self._events is not None:
                    self._stored(start + run_from, hs[run_from:j], local_hashes, block_tokens,
                                 seq_hashes, table.shared, table.lora, table.lora_name)
                run_from = -1
        if run_from >= 0 and self._events is not None:
            self._stored(start + run_from, hs[run_from:], local_hashes, block_tokens, seq_hashes,
                         table.shared, table.lora, table.lora_name)

    def _stored(self, first: int, hs: Sequence[int], local_hashes: Sequence[int],
                block_tokens: Callable[[int], Sequence[int]] | None,
                seq_hashes: Sequence[int], shared: int = ALL_SHARED, lora: int = 0,
                lora_name: str | None = None) -> None:
        """Publish blocks ``first .. first+len(hs)-1`` (consecutive, all newly visible) as one
        ``Stored`` batch, or as the batches between placeholders that publish nothing."""
        if self.events_for_placeholders or min(hs) >= 0:
            self._stored_run(first, hs, local_hashes, block_tokens, seq_hashes, shared, lora,
                             lora_name)
            return
        j0 = 0
        for j, h in enumerate(hs):
            if h < 0:
                if j > j0:
                    self._stored_run(first + j0, hs[j0:j], local_hashes, block_tokens, seq_hashes,
                                     shared, lora, lora_name)
                j0 = j + 1
        if j0 < len(hs):
            self._stored_run(first + j0, hs[j0:], local_hashes, block_tokens, seq_hashes, shared,
                             lora, lora_name)

    def _stored_run(self, first: int, hs: Sequence[int], local_hashes: Sequence[int],
                    block_tokens: Callable[[int], Sequence[int]] | None,
                    seq_hashes: Sequence[int], shared: int = ALL_SHARED, lora: int = 0,
                    lora_name: str | None = None) -> None:
        parent = seq_hashes[first - 1] if first > 0 else None
        end = first + len(hs)
        if block_tokens is not None:
            blocks = tuple([kv_block(h, local_hashes[i], tuple(block_tokens(i)))
                            for i, h in zip(range(first, end), hs, strict=True)])
        elif self.event_records and not lora:
            assert self._events is not None
            self._events.append(StoredRun(self._next_event_id, self.dp_rank, parent, hs,
                                          local_hashes[first:end],
                                          min(len(hs), max(0, shared - first))))
            self._next_event_id += 1
            return
        else:
            blocks = kv_blocks(hs, local_hashes[first:end])
        if lora:  # a LoRA request's blocks name its adapter (vLLM's BlockStored.lora_id, lora_name)
            self.publish_events(StoredBlocks(parent, blocks, lora_id=lora, lora_name=lora_name))
            return
        self.publish_events(stored_blocks(parent, blocks, None))

    def rekey(self, table: BlockTable, lo: int, hi: int, old: Sequence[int],
              new: Sequence[int]) -> None:
        """Rename cache-visible blocks ``table.ids[lo:hi]`` from the unique placeholder hashes
        ``old[i]`` to their real hashes ``new[i]``, as :meth:`finalize` would have registered
        them (a hash that already has a resident copy gains a duplicate). For callers that
        defer hashing blocks nothing can observe (no events are published here)."""
        ids = table.ids
        hashes = self._hash
        primary = self._primary
        for i in range(lo, hi):
            b = ids[i]
            o = old[i]
            if hashes[b] != o:
                raise ValueError(f"block {b} is not registered under placeholder {o}")
            if primary.get(o) == b:
                del primary[o]
            h = new[i]
            hashes[b] = h
            if primary.setdefault(h, b) != b:
                self._dups.setdefault(h, []).append(b)

    # -- release --------------------------------------------------------------------------

    def release(self, table: BlockTable) -> None:
        """Drop the table's references, tail first, and empty it."""
        self.releases += 1
        ids = table.ids
        table.ids = []
        nc = table.num_cached
        table.num_cached = 0
        if self._shared:
            self._release_counted(ids)
            return
        # Every referenced block has count 1, so all of the table's blocks go: its private
        # tail (unhashed) to the free list, its cache-visible head to the eviction policy,
        # each tail first, as the per-block walk would hand them over.
        ref = self._ref
        for b in ids:
            if not ref[b]:
                raise RuntimeError(f"block {b} released more often than referenced")
            ref[b] = 0
        if not nc:
            self._free += ids[::-1]
            return
        if nc < len(ids):
            self._free += ids[:nc - 1:-1]
        self._inactive += nc
        self._push_many(ids[nc - 1::-1])

    def _release_counted(self, ids: list[int]) -> None:
        ref = self._ref
        hashes = self._hash
        free = self._free
        inactive: list[int] = []
        shared = 0
        for b in reversed(ids):
            r = ref[b] - 1
            if r < 0:
                raise RuntimeError(f"block {b} released more often than referenced")
            ref[b] = r
            if r == 0:
                if hashes[b] is None:
                    free.append(b)
                else:
                    inactive.append(b)
            elif r == 1:
                shared += 1
        self._shared -= shared
        if inactive:
            self._inactive += len(inactive)
            self._push_many(inactive)

    # -- events ---------------------------------------------------------------------------

    @property
    def events_enabled(self) -> bool:
        return self._events is not None

    def publish_events(self, data: StoredBlocks | RemovedBlocks) -> None:
        assert self._events is not None
        self._events.append(kv_event(self._next_event_id, self.dp_rank, data))
        self._next_event_id += 1

    def discard_events(self) -> None:
        """Drop the events published so far and number the next one 0, as if none had been
        (a warm start's preload, servesim.kv.warm_start)."""
        if self._events is not None:
            self._events = []
        self._next_event_id = 0

    def drain_events(self) -> list[KvEvent]:
        """Events published since the last drain, oldest first (empty when disabled); with
        ``event_records``, records among them (servesim.kv.event_records)."""
        events = self._events
        if not events:
            return []
        self._events = []
        return events


#: The int objects used as block ids, shared by every pool of the process: a multi-worker
#: replay then walks one set of id objects instead of one per rank (a smaller working set for
#: the per-block loops; ids above 256 are separate heap objects in CPython).
_BLOCK_IDS: list[int] = []


def _block_ids(n: int) -> list[int]:
    """``list(range(n))``, built from the shared id objects."""
    if len(_BLOCK_IDS) < n:
        _BLOCK_IDS.extend(range(len(_BLOCK_IDS), n))
    return _BLOCK_IDS[:n]


__all__ = ["BlockPool", "BlockTable"]
