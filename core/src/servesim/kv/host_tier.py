"""A host-memory KV tier (G2) driven by simulated time, for any backend (aisimulate-engine.md §9).

The tier holds whole blocks by their sequence hash, up to ``capacity_blocks``. Blocks move
in through device-to-host *stores* and out through host-to-device *loads*; each direction is
one FIFO lane (a transfer starts when the previous one on its lane ends, or when it is
submitted, whichever is later) and takes ``latency_to_first_byte_ms + bytes / (GB/s × 1e6)``
ms; bandwidth 0 means instantaneous. Nothing runs by itself: :meth:`HostTier.tick` completes
the transfers due by a time the caller passes, so a rank settles them at its pass boundaries
and internal deadlines.

* A store is prepared (its missing blocks take entries, pending, evicting least recently used
  resident blocks that no load pins), then submitted; its blocks become resident when it
  completes, as one recency cohort. A store that cannot find room changes nothing.
* A load pins its resident blocks until it completes or is cancelled.
* Recency: :meth:`touch` makes one block the most recent; a completing transfer's blocks share
  one recency step, ordered by hash inside it (the reference's "epoch" with a deterministic
  tie-break).
* Residency changes publish KV events with ``medium="CPU"`` (``Stored`` when a store
  completes, ``Removed`` when a block is evicted), when events are enabled.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import islice

from attrs import define, frozen

from servesim.contract import KvBlock, RemovedBlocks, StoredBlocks

HOST_MEDIUM = "CPU"


@frozen(kw_only=True)
class NativeHostOffloadConfig:
    """``engine.native_host_offload`` (aisimulate-engine.md §5.4); bandwidths in decimal GB/s."""

    num_host_blocks: int
    d2h_bandwidth_gbps: float = 32.0
    h2d_bandwidth_gbps: float = 32.0
    latency_to_first_byte_ms: float = 0.0


class Lookup(enum.Enum):
    MISS = "miss"
    PENDING = "pending"  # a store of it is still in flight
    HIT = "hit"


class TransferKind(enum.Enum):
    STORE = "store"
    LOAD = "load"


@define(slots=True)
class Transfer:
    transfer_id: int
    kind: TransferKind
    request_id: int
    keys: list[int]
    local_hashes: list[int]
    deadline: float | None = None  # set when submitted


@define(slots=True)
class HostTotals:
    """Cumulative transfer counts, for the report."""

    stores: int = 0
    stored_blocks: int = 0
    loads: int = 0
    loaded_blocks: int = 0
    cancelled_loads: int = 0
    evicted_blocks: int = 0


class _Lane:
    __slots__ = ("bytes_per_ms", "latency", "tail")

    def __init__(self, gbps: float, latency_ms: float) -> None:
        self.bytes_per_ms = gbps * 1e6 if gbps > 0 else math.inf
        self.latency = latency_ms
        self.tail = 0.0

    def submit(self, not_before: float, nbytes: int) -> float:
        start = self.tail if self.tail > not_before else not_before
        duration = 0.0 if math.isinf(self.bytes_per_ms) else nbytes / self.bytes_per_ms
        self.tail = start + self.latency + duration
        return self.tail


class HostTier:
    """One rank's private host pool (see the module docstring)."""

    def __init__(self, config: NativeHostOffloadConfig, block_bytes: int,
                 publish: Callable[[StoredBlocks | RemovedBlocks], None] | None = None) -> None:
        """``publish`` receives the tier's KV event data (the rank numbers the events in
        one stream with its device pool's); None: no events."""
        if config.num_host_blocks <= 0 or block_bytes <= 0:
            raise ValueError("a host tier needs positive capacity and block bytes")
        self.capacity = config.num_host_blocks
        self.block_bytes = block_bytes
        self._d2h = _Lane(config.d2h_bandwidth_gbps, config.latency_to_first_byte_ms)
        self._h2d = _Lane(config.h2d_bandwidth_gbps, config.latency_to_first_byte_ms)
        # key -> transfer id of its in-flight store, or None once resident
        self._entries: dict[int, int | None] = {}
        self._pins: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()  # resident blocks, oldest first
        self._transfers: dict[int, Transfer] = {}
        self._prepared: list[int] = []
        self._due: list[tuple[float, int, int]] = []  # (deadline, kind order, transfer id)
        self._next_id = 1
        self.totals = HostTotals()
        self._publish_data = publish

    # -- queries --------------------------------------------------------------------------

    def lookup(self, key: int) -> Lookup:
        state = self._entries.get(key, -1)
        if state == -1:
            return Lookup.MISS
        return Lookup.HIT if state is None else Lookup.PENDING

    @property
    def num_blocks(self) -> int:
        return len(self._entries)

    def has_transfer(self, transfer_id: int) -> bool:
        return transfer_id in self._transfers

    def deadline(self, transfer_id: int) -> float | None:
        """A submitted transfer's deadline; None once done (or not yet submitted)."""
        t = self._transfers.get(transfer_id)
        return t.deadline if t is not None else None

    def next_deadline(self) -> float | None:
        due = self._due
        while due and due[0][2] not in self._transfers:
            heapq.heappop(due)  # cancelled
        return due[0][0] if due else None

    @property
    def pinned(self) -> int:
        """Blocks pinned by transfers in flight (0 once every transfer has finished)."""
        return len(self._pins)

    @property
    def busy(self) -> bool:
        return bool(self._transfers)

    # -- recency --------------------------------------------------------------------------

    def touch(self, key: int) -> None:
        if key in self._lru:
            self._lru.move_to_end(key)

    def _touch_cohort(self, keys: Sequence[int]) -> None:
        lru = self._lru
        for key in sorted(keys):
            if self._entries.get(key, -1) is None and not self._pins.get(key):
                lru[key] = None
                lru.move_to_end(key)

    # -- stores ---------------------------------------------------------------------------

    def prepare_store(self, request_id: int, keys: Sequence[int],
                      local_hashes: Sequence[int]) -> int | None:
        """Take entries for the blocks of ``keys`` the tier lacks (``local_hashes``: their
        token-only hashes, for events); the store's transfer id, 0 when every block is
        already present, None when there is no room (nothing changed)."""
        entries = self._entries
        missing, local = [], []
        for k, h in zip(keys, local_hashes, strict=True):
            if k not in entries and k not in missing:
                missing.append(k)
                local.append(h)
        if not missing:
            return 0
        shortfall = len(missing) - (self.capacity - len(self._entries))
        if shortfall > 0:
            protected = set(keys)
            victims = list(islice((k for k in self._lru if k not in protected), shortfall))
            if len(victims) < shortfall:
                return None
            self._evict(victims)
        tid = self._new_id()
        for k in missing:
            self._entries[k] = tid
        self._transfers[tid] = Transfer(tid, TransferKind.STORE, request_id, missing, local)
        self._prepared.append(tid)
        return tid

    def submit_prepared_stores(self, now: float) -> None:
        for tid in self._prepared:
            t = self._transfers[tid]
            t.deadline = self._d2h.submit(now, len(t.keys) * self.block_bytes)
            heapq.heappush(self._due, (t.deadline, 0, tid))
            self.totals.stores += 1
            self.totals.stored_blocks += len(t.keys)
        self._prepared.clear()

    def _evict(self, victims: list[int]) -> None:
        for k in victims:
            del self._entries[k]
            del self._lru[k]
        self.totals.evicted_blocks += len(victims)
        self._publish(RemovedBlocks(tuple(victims), medium=HOST_MEDIUM))

    # -- loads ----------------------------------------------------------------------------

    def schedule_load(self, request_id: int, keys: Sequence[int], now: float,
                      not_before: float) -> int:
        """Queue an H2D of resident ``keys`` (pinned until it ends); its transfer id."""
        tid = self._new_id()
        for k in keys:
            self._pins[k] = self._pins.get(k, 0) + 1
            self._lru.pop(k, None)
        t = Transfer(tid, TransferKind.LOAD, request_id, list(keys), [])
        t.deadline = self._h2d.submit(max(now, not_before), len(keys) * self.block_bytes)
        self._transfers[tid] = t
        heapq.heappush(self._due, (t.deadline, 1, tid))
        self.totals.loads += 1
        self.totals.loaded_blocks += len(keys)
        return tid

    def cancel_load(self, transfer_id: int) -> None:
        """Drop a queued load at once; its lane time stays spent (the copy was issued)."""
        t = self._transfers.pop(transfer_id)
        self._unpin(t.keys)
        self.totals.cancelled_loads += 1

    def _unpin(self, keys: Sequence[int]) -> None:
        for k in keys:
            n = self._pins[k] - 1
            if n:
                self._pins[k] = n
            else:
                del self._pins[k]
        self._touch_cohort(keys)

    # -- time -----------------------------------------------------------------------------

    def tick(self, now: float) -> list[Transfer]:
        """Complete every transfer due by ``now`` (stores before loads at one time)."""
        done: list[Transfer] = []
        due = self._due
        while due and due[0][0] <= now:
            _, _, tid = heapq.heappop(due)
            t = self._transfers.pop(tid, None)
            if t is None:
                continue  # cancelled
            if t.kind is TransferKind.STORE:
                for k in t.keys:
                    self._entries[k] = None
                self._touch_cohort(t.keys)
                self._publish(StoredBlocks(
                    None, tuple(map(KvBlock, t.keys, t.local_hashes)), medium=HOST_MEDIUM))
            else:
                self._unpin(t.keys)
            done.append(t)
        return done

    # -- events ---------------------------------------------------------------------------

    def _publish(self, data: StoredBlocks | RemovedBlocks) -> None:
        if self._publish_data is not None:
            self._publish_data(data)

    def _new_id(self) -> int:
        tid = self._next_id
        self._next_id += 1
        return tid


def block_bytes(block_size: int, kv_bytes_per_token: float) -> int:
    return int(round(block_size * kv_bytes_per_token))


__all__ = ["HOST_MEDIUM", "HostTier", "HostTotals", "Lookup", "NativeHostOffloadConfig",
           "Transfer", "TransferKind", "block_bytes"]
