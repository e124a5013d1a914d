"""Eviction policies order the evictable units of a KV cache.

Two kinds, told apart by the class attribute ``uses_records`` (the cache asks for nothing it
does not need, so the cheap kind keeps the replay's fast paths):

* :class:`EvictionPolicy` (``uses_records = False``) sees block ids only, in the order blocks
  become evictable. The pool calls :meth:`EvictionPolicy.push` when a cached block's reference
  count drops to zero, :meth:`~EvictionPolicy.remove` when a request reuses it, and
  :meth:`~EvictionPolicy.pop` to choose a victim. ``lru``, the reference's default
  (dynamo-mocker.md §3.2), is one; runs of passes stay available with it.
* :class:`RecordEvictionPolicy` (``uses_records = True``) receives an :class:`EvictableBlock`
  record for every evictable unit (a cached block of the vLLM and TRT-LLM block pools, a leaf
  page of SGLang's radix tree), the current simulated time with every call, and a
  notification of every hit on a unit that is in use. Its ranks step pass by pass: a run of
  passes does not give the per-pass time the records carry.

Register either kind through ``servesim_register_eviction_policies``. A class with a
``config_class`` is built as ``cls(config)`` from ``engine.eviction_policy: {type: NAME,
...options}``; without one it is built as ``cls()``. :mod:`servesim.kv.eviction_records`
holds the pool that drives a record policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from servesim._compiled import mypyc_attr

# EvictableBlock's fields, for its __repr__ too: a compiled class has no __slots__ at run time.
_EVICTABLE_FIELDS = ("block_id", "block_hash", "parent_hash", "position", "num_tokens",
                     "ref_count", "hit_count", "last_access_ms", "generated", "tier")


class EvictableBlock:
    """What a cache tells a :class:`RecordEvictionPolicy` about one evictable unit.

    The cache owns the record and refreshes its fields before each call that hands it over;
    a policy may keep it (for instance in a heap) and compare records by identity. A unit
    that stops being evictable and becomes evictable again comes back as a new record.

    * ``block_id``: the unit's id, unique among the cache's resident units.
    * ``block_hash``, ``parent_hash``: the chained sequence hash of the unit and of the unit
      before it in its sequence (None at position 0), as in the KV events (§3.1).
    * ``position``: the unit's index in its sequence (0 = first block or page).
    * ``num_tokens``: tokens it holds (the block or page size).
    * ``ref_count``: requests using it (0 while it is evictable).
    * ``hit_count``: how often a request found it cached and reused it.
    * ``last_access_ms``: the simulated start of the pass that last stored, used or released it.
    * ``generated``: True when it holds generated (output) tokens, False when only prompt.
    * ``tier``: the memory tier, 0 for device (GPU) memory, the only tier servesim models.
    """

    __slots__ = _EVICTABLE_FIELDS

    def __init__(self, block_id: int, block_hash: int | None, parent_hash: int | None,
                 position: int, num_tokens: int, *, ref_count: int = 0, hit_count: int = 0,
                 last_access_ms: float = 0.0, generated: bool = False, tier: int = 0) -> None:
        self.block_id = block_id
        self.block_hash = block_hash
        self.parent_hash = parent_hash
        self.position = position
        self.num_tokens = num_tokens
        self.ref_count = ref_count
        self.hit_count = hit_count
        self.last_access_ms = last_access_ms
        self.generated = generated
        self.tier = tier

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _EVICTABLE_FIELDS)
        return f"EvictableBlock({fields})"


@mypyc_attr(allow_interpreted_subclasses=True)
class RecordEvictionPolicy(ABC):
    """Orders evictable units from their records (see the module docstring).

    The cache calls, with the current simulated time ``now_ms``:

    * :meth:`insert` when a unit becomes evictable (no request uses it any more);
    * :meth:`remove` when an evictable unit stops being evictable: a request reused it
      (``hit_count`` already counts that hit) or the cache's structure changed (a radix leaf
      gained a child or was extended);
    * :meth:`hit` when a request reuses a unit that another request is using;
    * :meth:`evict` to choose a victim: remove it and return its record.
    """

    uses_records: ClassVar[bool] = True
    config_class: ClassVar[type | None] = None

    @abstractmethod
    def insert(self, block: EvictableBlock, now_ms: float) -> None:
        """``block`` became evictable."""

    @abstractmethod
    def remove(self, block: EvictableBlock, now_ms: float) -> None:
        """``block`` (present) stopped being evictable."""

    @abstractmethod
    def evict(self, now_ms: float) -> EvictableBlock:
        """Remove and return the next victim. Only called when ``len(self) > 0``."""

    def hit(self, block: EvictableBlock, now_ms: float) -> None:
        """A request reused ``block`` while another request was using it (so it is not
        evictable now). By default nothing happens: the record's ``hit_count`` counts it."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, block: object) -> bool:
        """Whether ``block`` (a record) is one of the evictable units held."""


def policy_factory(cls: type, config: Any = None) -> Callable[[], Any]:
    """A zero-argument callable building one policy per cache: ``cls(config)`` for a class
    with a ``config_class``, ``cls()`` otherwise."""
    if getattr(cls, "config_class", None) is None:
        return cls
    return partial(cls, config)


def uses_records(policy: object) -> bool:
    """Whether ``policy`` is a record policy (the cache must build records for it)."""
    return bool(getattr(policy, "uses_records", False))


def eviction_refusal(rank_class: type, policy: object) -> str | None:
    """Why ``rank_class`` cannot honour ``policy`` (None when it can), from its class attribute
    ``eviction_support``, a set of: ``"records"`` (it drives a :class:`RecordEvictionPolicy`),
    ``"ids"`` (any :class:`EvictionPolicy`), ``"lru"`` (the built-in ``lru`` only, for a cache
    with its own LRU order or none at all)."""
    support = getattr(rank_class, "eviction_support", frozenset({"lru"}))
    if uses_records(policy):
        if "records" in support:
            return None
        return "cannot drive an eviction policy that orders block records"
    if "ids" in support or ("lru" in support and type(policy) is LruEviction):
        return None
    if "lru" in support and "records" in support:
        return "drives only the built-in 'lru' and eviction policies that order block records"
    return "drives no eviction policy but the built-in 'lru'"


@mypyc_attr(allow_interpreted_subclasses=True)
class EvictionPolicy(ABC):
    """Orders evictable blocks by id (see the module docstring)."""

    uses_records: ClassVar[bool] = False
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

    def push_many(self, block_ids: list[int]) -> None:
        """:meth:`push` each block in order (the pool may hand over ``block_ids``: a policy
        can keep the list). Override for speed; the result must equal the loop."""
        for b in block_ids:
            self.push(b)

    def pop_many(self, n: int) -> list[int]:
        """The next ``n`` victims, as ``n`` calls of :meth:`pop` (``n <= len(self)``)."""
        return [self.pop() for _ in range(n)]


@mypyc_attr(allow_interpreted_subclasses=True)
class LruEviction(EvictionPolicy):
    """Evict the block that became evictable longest ago (dynamo-mocker.md §3.2: oldest
    insertion time first; vLLM v1's free-block queue behaves the same way).

    The order is a queue of pushed batches (the pool releases a request's blocks as one
    batch), so pushing and evicting cost list operations per batch plus one pointer store per
    block, rather than a linked-list node per block. ``entry_batch[block]`` is the batch holding
    the block's live entry (None when absent); an entry is live iff its block still points at
    the entry's batch, so :meth:`remove` only clears the pointer (lazy deletion) and counts
    the entry as stale. While no stale entry lies ahead, evicting ``n`` blocks is slicing;
    stale entries are skipped one by one, and compacted away once they outnumber the live
    ones, so memory stays proportional to the pool. Block ids are non-negative ints (a
    pool's ``0 .. N-1``).
    """

    def __init__(self) -> None:
        self._chunks: deque[list[int]] = deque()  # pushed batches, oldest first
        self._head = 0  # index of the next entry in _chunks[0]
        self.entry_batch: list[list[int] | None] = []  # block -> batch of its live entry
        self._len = 0
        self._stale = 0  # entries not yet consumed whose block was removed

    def reserve(self, num_blocks: int) -> None:
        """Size the block table for ids ``0 .. num_blocks-1`` (it also grows on demand)."""
        batch = self.entry_batch
        if num_blocks > len(batch):
            batch.extend([None] * (num_blocks - len(batch)))

    def push(self, block_id: int) -> None:
        self.push_many([block_id])

    def push_many(self, block_ids: list[int]) -> None:
        batch = self.entry_batch
        done = 0
        try:
            for b in block_ids:
                if batch[b] is not None:
                    break
                batch[b] = block_ids
                done += 1
            else:
                if block_ids:
                    self._chunks.append(block_ids)
                    self._len += len(block_ids)
                return
        except (IndexError, TypeError):
            # An id beyond the table (or not an int): undo this batch's pointers, retry.
            for b in block_ids[:done]:
                batch[b] = None
            self._check_ids(block_ids)
            self.push_many(block_ids)
            return
        # A block that is already present keeps its place (like an ordered-dict insert).
        self._check_ids(block_ids)
        kept = block_ids[:done]
        for b in block_ids[done:]:
            if batch[b] is None:
                batch[b] = kept
                kept.append(b)
        for b in block_ids[:done]:
            batch[b] = kept
        if kept:
            self._chunks.append(kept)
            self._len += len(kept)

    def _check_ids(self, block_ids: list[int]) -> None:
        """Non-negative ints only (raises otherwise); grows the table to hold them."""
        if min(block_ids) < 0:
            raise ValueError(f"block ids are non-negative ints, got {min(block_ids)}")
        self.reserve(max(block_ids) + 1)

    def remove(self, block_id: int) -> None:
        batch = self.entry_batch
        if not 0 <= block_id < len(batch) or batch[block_id] is None:
            raise KeyError(block_id)
        batch[block_id] = None
        self._len -= 1
        self._stale += 1
        if self._stale > self._len + _COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drop every stale entry: the live ones, in order, become one batch."""
        live = self._take(self._len)
        batch = self.entry_batch
        for b in live:
            batch[b] = live
        self._chunks = deque([live]) if live else deque()
        self._head = 0
        self._len = len(live)
        self._stale = 0

    def pop(self) -> int:
        if not self._len:
            raise KeyError("pop from an empty eviction policy")
        return self.pop_many(1)[0]

    def pop_many(self, n: int) -> list[int]:
        out = self.pop_unmarked(n)
        batch = self.entry_batch
        for b in out:
            batch[b] = None
        return out

    def pop_unmarked(self, n: int) -> list[int]:
        """:meth:`pop_many`, except that the victims' ``entry_batch`` entries are left for the caller
        to set to None (before anything else uses this policy): a pool that walks the victims
        anyway saves a loop."""
        if n > self._len:
            raise KeyError(f"pop_many({n}) with only {self._len} evictable blocks")
        if n <= 0:
            return []
        if self._stale:
            return self._take(n)
        # Every entry ahead is live: slice batches.
        chunks = self._chunks
        chunk = chunks[0]
        head = self._head
        end = head + n
        if end < len(chunk):
            out = chunk[head:end]
            self._head = end
        elif end == len(chunk):
            out = chunk if not head else chunk[head:]
            chunks.popleft()
            self._head = 0
        else:
            out = chunk[head:]
            chunks.popleft()
            need = end - len(chunk)
            while need:
                chunk = chunks[0]
                if need < len(chunk):
                    out += chunk[:need]
                    self._head = need
                    break
                out += chunk
                chunks.popleft()
                need -= len(chunk)
            else:
                self._head = 0
        self._len -= n
        return out

    def _take(self, n: int) -> list[int]:
        """Consume the next ``n`` live entries (there are at least ``n``), skipping stale ones;
        their ``entry_batch`` entries are left as they are."""
        chunks = self._chunks
        batch = self.entry_batch
        head = self._head
        out: list[int] = []
        while n:
            chunk = chunks[0]
            size = len(chunk)
            while head < size and n:
                b = chunk[head]
                head += 1
                if batch[b] is chunk:  # its newest entry: live (consumed ones are behind)
                    out.append(b)
                    n -= 1
                else:
                    self._stale -= 1
            if head == size:
                chunks.popleft()
                head = 0
        self._head = head
        self._len -= len(out)
        return out

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: object) -> bool:
        batch = self.entry_batch
        if not isinstance(block_id, int) or not 0 <= block_id < len(batch):
            return False
        return batch[block_id] is not None


#: Stale entries tolerated beyond the live ones before :meth:`LruEviction._compact` runs.
_COMPACT_SLACK = 4096
