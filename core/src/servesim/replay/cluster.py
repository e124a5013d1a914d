"""Aggregated workers and the load the router sees.

Each worker is an :class:`servesim.engine.Engine` (``dp_size`` ranks). A *slot* is one
``(worker, dp_rank)`` pair, numbered ``worker * dp_size + dp_rank``. :class:`ClusterState`
tracks, per slot, what a front-end router knows without peeking inside engines: requests routed
and not yet finished, prompt tokens still waiting for their prefill (cleared at the first
token), and the prompt blocks of in-flight requests. When block hashes are given, a block
shared by several in-flight prompts on one slot counts once, as in Dynamo's active-sequence
tracking; decode growth is not tracked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat

from servesim.engine import Engine

#: Bits per slot in a packed holder count (:attr:`ClusterState.holders`): room for 2**32 - 1
#: in-flight requests holding one block on one slot.
FIELD_BITS = 32
_FIELD = (1 << FIELD_BITS) - 1

#: :class:`ClusterState`'s attributes, for readers that compare whole states (the router
#: conformance kit). A compiled build has no ``__slots__`` to read them from.
STATE_FIELDS = ("num_workers", "dp_size", "active_requests", "prefill_tokens", "active_blocks",
                "holders", "_req", "on_slot")


class ClusterState:
    """Per-slot load, maintained by the driver from routing decisions and request progress.

    Active prompt blocks live in one dict for all slots, ``holders``: block hash -> packed
    counts, ``FIELD_BITS`` bits per slot (slot ``s`` in bits ``s * FIELD_BITS`` and up), each
    the number of in-flight requests on that slot whose prompt holds the block. One lookup per
    block then answers "is it active anywhere", which for a fresh prompt (the common case) is
    all a router or an add/finish needs, done in bulk without a per-block Python step.
    """

    __slots__ = STATE_FIELDS

    def __init__(self, num_workers: int, dp_size: int) -> None:
        self.num_workers = num_workers
        self.dp_size = dp_size
        n = num_workers * dp_size
        self.active_requests = [0] * n
        self.prefill_tokens = [0] * n
        self.active_blocks = [0] * n
        self.holders: dict[int, int] = {}
        # request id -> [slot, pending prefill tokens, blocks counted, distinct hashes or None,
        # unhashed tail blocks]
        self._req: dict[int, list] = {}
        # Per slot, its in-flight request ids (insertion-ordered keys; values unused).
        self.on_slot: list[dict[int, None]] = [{} for _ in range(n)]

    @property
    def num_slots(self) -> int:
        return self.num_workers * self.dp_size

    @property
    def active_hashes(self) -> list[dict[int, int]]:
        """Per slot, ``hash -> in-flight requests holding it`` (a view built on demand)."""
        out: list[dict[int, int]] = [{} for _ in range(self.num_slots)]
        for h, packed in self.holders.items():
            for s, counts in enumerate(out):
                c = (packed >> (s * FIELD_BITS)) & _FIELD
                if c:
                    counts[h] = c
        return out

    def slot(self, worker: int, dp_rank: int) -> int:
        return worker * self.dp_size + dp_rank

    def held_counts(self, block_hashes: Sequence[int]) -> list[int]:
        """Per slot, how many entries of ``block_hashes`` are active there."""
        n = self.num_slots
        hits = list(filter(None, map(self.holders.get, block_hashes)))
        if not hits:
            return [0] * n
        out = []
        for s in range(n):
            field = _FIELD << (s * FIELD_BITS)
            out.append(len([p for p in hits if p & field]))
        return out

    def add(
        self,
        request_id: int,
        slot: int,
        prefill_tokens: int,
        blocks: int,
        block_hashes: Sequence[int] | None = None,
    ) -> None:
        """Route a request of ``blocks`` prompt blocks; with ``block_hashes`` (its full blocks),
        blocks already active on the slot are not counted again."""
        distinct = None
        tail = 0
        if block_hashes is not None:
            distinct, fresh = self._hold(slot, block_hashes)
            tail = blocks - len(block_hashes)  # a partial last block is never shared
            blocks = fresh + tail
        self._req[request_id] = [slot, prefill_tokens, blocks, distinct, tail]
        self.on_slot[slot][request_id] = None
        self.active_requests[slot] += 1
        self.prefill_tokens[slot] += prefill_tokens
        self.active_blocks[slot] += blocks

    def _hold(self, slot: int, block_hashes: Sequence[int]) -> tuple[Sequence[int], int]:
        """Count one more holder on ``slot`` of each distinct hash: ``(the distinct hashes,
        how many were not active on the slot)``."""
        if not block_hashes:
            return block_hashes, 0
        holders = self.holders
        one = 1 << (slot * FIELD_BITS)
        if holders.keys().isdisjoint(block_hashes):
            before = len(holders)
            holders.update(zip(block_hashes, repeat(one)))
            fresh = len(holders) - before
            if fresh == len(block_hashes):
                return block_hashes, fresh
            return tuple(dict.fromkeys(block_hashes)), fresh  # a hash repeated in the prompt
        distinct = tuple(dict.fromkeys(block_hashes))
        shift = slot * FIELD_BITS
        get = holders.get
        fresh = 0
        for h in distinct:
            packed = get(h, 0)
            if not (packed >> shift) & _FIELD:
                fresh += 1
            holders[h] = packed + one
        return distinct, fresh

    def prefill_done(self, request_id: int) -> None:
        rec = self._req.get(request_id)
        if rec is not None and rec[1]:
            self.prefill_tokens[rec[0]] -= rec[1]
            rec[1] = 0

    def finish(self, request_id: int) -> None:
        rec = self._req.pop(request_id, None)
        if rec is None:
            return
        slot, prefill, blocks, distinct, tail = rec
        del self.on_slot[slot][request_id]
        self.prefill_tokens[slot] -= prefill
        if distinct:
            blocks = self._release(slot, distinct) + tail
        elif distinct is not None:
            blocks = tail
        self.active_blocks[slot] -= blocks
        self.active_requests[slot] -= 1

    def release_bound(self, request_id: int) -> tuple[int, int]:
        """``(most active blocks, prefill tokens)`` its :meth:`finish` can remove from its slot.

        A request's finish frees at most its distinct hashes and its tail (a shared block it
        did not count when routed may be freed by it if it is the last holder), so its counted
        blocks are not a bound; with no hashes it frees exactly what it counted."""
        _slot, prefill, blocks, distinct, tail = self._req[request_id]
        if distinct is not None:
            blocks = len(distinct) + tail
        return blocks, prefill

    def _release(self, slot: int, distinct: Sequence[int]) -> int:
        """Drop one holder on ``slot`` of each hash; how many are then inactive there."""
        holders = self.holders
        one = 1 << (slot * FIELD_BITS)
        packed = list(map(holders.__getitem__, distinct))
        if packed.count(one) == len(packed):  # held by this request alone: drop them all
            list(map(holders.__delitem__, distinct))
            return len(packed)
        shift = slot * FIELD_BITS
        freed = 0
        for h, p in zip(distinct, packed, strict=True):
            p -= one
            if not (p >> shift) & _FIELD:
                freed += 1
            if p:
                holders[h] = p
            else:
                del holders[h]
        return freed


def build_engines(build: Callable[[int], Engine], workers: int) -> list[Engine]:
    """``workers`` engines with worker ids ``0..workers-1`` (e.g. ``EngineFactory.build``)."""
    if workers < 1:
        raise ValueError(f"cluster.workers must be >= 1, got {workers}")
    engines = [build(w) for w in range(workers)]
    sizes = {e.dp_size for e in engines}
    if len(sizes) != 1:
        raise ValueError(f"every worker must have the same dp_size, got {sorted(sizes)}")
    return engines
