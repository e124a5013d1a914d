"""A deliberately plain, per-block model of :class:`servesim.kv.pool.BlockPool` for
equivalence tests: one loop iteration per block, an ordered dict as the LRU, no fast paths.

It pins what the optimised pool must reproduce exactly: block ids handed out (free list from
its end, then LRU victims), reference counts, the first-copy/duplicate bookkeeping, and the
KV event stream with its ids (dynamo-mocker.md §3.3-§3.4).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks


class RefTable:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.num_cached = 0


class RefPool:
    def __init__(self, n: int, caching: bool = True, events: bool = False) -> None:
        self.capacity = n
        self.caching = caching
        self.free = list(range(n - 1, -1, -1))
        self.ref = [0] * n
        self.hash: list[int | None] = [None] * n
        self.copies: dict[int, list[int]] = {}  # hash -> resident copies, oldest (primary) first
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.events: list[KvEvent] | None = [] if (events and caching) else None
        self.next_id = 0
        self.coalesce_removals = False
        self.events_for_placeholders = True

    def occupancy(self) -> tuple[int, int, int]:
        free, inactive = len(self.free), len(self.lru)
        return self.capacity - free - inactive, inactive, free

    def publish(self, data: StoredBlocks | RemovedBlocks) -> None:
        assert self.events is not None
        self.events.append(KvEvent(self.next_id, 0, data))
        self.next_id += 1

    def lookup(self, seq: Sequence[int]) -> tuple[int, int]:
        if not self.caching:
            return 0, 0
        active = 0
        for i, h in enumerate(seq):
            if h not in self.copies:
                return i, active
            active += self.ref[self.copies[h][0]] > 0
        return len(seq), active

    def allocate(self, t: RefTable, target: int, prefix: Sequence[int] = ()) -> bool:
        have = len(t.ids)
        if target <= have:
            return True
        stop = min(len(prefix), target) if self.caching else have
        reuse = [self.copies[prefix[i]][0] for i in range(have, stop)]
        fresh = target - have - len(reuse)
        if fresh > len(self.free) + len(self.lru) - sum(self.ref[b] == 0 for b in reuse):
            return False
        for b in reuse:
            if self.ref[b] == 0:
                del self.lru[b]
            self.ref[b] += 1
            t.ids.append(b)
        if reuse:
            t.num_cached = len(t.ids)
        # With duplicate copies anywhere, evictions publish one unfiltered event each even
        # when coalescing (the pool's exact path for that rare case).
        per_block = any(len(c) > 1 for c in self.copies.values())
        removed: list[int] = []
        for _ in range(fresh):
            if self.free:
                b = self.free.pop()
            else:
                b = self.lru.popitem(last=False)[0]
                h = self.hash[b]
                self.hash[b] = None
                if self.drop(h, b):
                    removed.append(h)
            self.ref[b] = 1
            t.ids.append(b)
        self.publish_removed(removed, per_block)
        return True

    def drop(self, h: int | None, b: int) -> bool:
        """Forget copy ``b``; True when it was the last copy of ``h``."""
        if h is None:
            return False
        copies = self.copies[h]
        copies.remove(b)
        if copies:
            return False
        del self.copies[h]
        return True

    def publish_removed(self, removed: list[int], per_block: bool) -> None:
        if self.events is None or not removed:
            return
        if per_block or not self.coalesce_removals:
            for h in removed:
                self.publish(RemovedBlocks((h,)))
            return
        keep = [h for h in removed if h >= 0 or self.events_for_placeholders]
        if keep:
            self.publish(RemovedBlocks(tuple(keep)))

    def finalize(self, t: RefTable, upto: int, seq: Sequence[int], local: Sequence[int],
                 tokens: Callable[[int], Sequence[int]] | None = None) -> None:
        if not self.caching:
            return
        upto = min(upto, len(t.ids))
        run: list[KvBlock] = []
        parent: int | None = None
        for i in range(t.num_cached, upto):
            b, h = t.ids[i], seq[i]
            self.hash[b] = h
            new = h not in self.copies
            self.copies.setdefault(h, []).append(b)
            visible = new and (h >= 0 or self.events_for_placeholders)
            if not visible:
                self.flush(parent, run)
                run = []
                continue
            if not run:
                parent = seq[i - 1] if i > 0 else None
            run.append(KvBlock(h, local[i], tuple(tokens(i)) if tokens else None))
        self.flush(parent, run)
        t.num_cached = max(t.num_cached, upto)

    def rekey(self, t: RefTable, lo: int, hi: int, old: Sequence[int], new: Sequence[int]) -> None:
        for i in range(lo, hi):
            b = t.ids[i]
            assert self.hash[b] == old[i]
            self.drop(old[i], b)
            self.hash[b] = new[i]
            self.copies.setdefault(new[i], []).append(b)

    def flush(self, parent: int | None, run: list[KvBlock]) -> None:
        if run and self.events is not None:
            self.publish(StoredBlocks(parent, tuple(run)))

    def release(self, t: RefTable) -> None:
        for b in reversed(t.ids):
            self.ref[b] -= 1
            assert self.ref[b] >= 0
            if self.ref[b] == 0:
                if self.hash[b] is None:
                    self.free.append(b)
                else:
                    self.lru[b] = None
        t.ids = []
        t.num_cached = 0

    def drain(self) -> list[KvEvent]:
        events, self.events = self.events, ([] if self.events is not None else None)
        return events or []
