"""servesim.kv.host_tier: LRU residency, FIFO transfer lanes in simulated time, pins and
CPU-medium events (aisimulate-engine.md §9)."""

from __future__ import annotations

import pytest
from servesim.contract import RemovedBlocks, StoredBlocks
from servesim.kv.host_tier import HostTier, Lookup, NativeHostOffloadConfig

BLOCK = 1_000_000  # bytes: 1 ms per block at 1 GB/s


def tier(capacity: int = 4, d2h: float = 1.0, h2d: float = 2.0, latency: float = 0.0):
    events: list = []
    t = HostTier(NativeHostOffloadConfig(num_host_blocks=capacity, d2h_bandwidth_gbps=d2h,
                                         h2d_bandwidth_gbps=h2d,
                                         latency_to_first_byte_ms=latency),
                 BLOCK, events.append)
    return t, events


def store(t: HostTier, keys: list[int], now: float) -> int:
    tid = t.prepare_store(0, keys, [k + 1000 for k in keys])
    assert tid
    t.submit_prepared_stores(now)
    return tid


def test_stores_queue_on_one_lane_and_become_resident_when_done() -> None:
    t, events = tier()
    a = store(t, [1, 2], 0.0)
    b = store(t, [3], 1.0)
    assert t.deadline(a) == pytest.approx(2.0) and t.deadline(b) == pytest.approx(3.0)
    assert t.lookup(1) is Lookup.PENDING and t.next_deadline() == pytest.approx(2.0)
    assert [x.transfer_id for x in t.tick(2.5)] == [a]
    assert t.lookup(1) is Lookup.HIT and t.lookup(3) is Lookup.PENDING
    (ev,) = events
    assert isinstance(ev, StoredBlocks) and ev.medium == "CPU"
    assert [b.block_hash for b in ev.blocks] == [1, 2] and [b.tokens_hash for b in ev.blocks] == [1001, 1002]
    assert t.totals.stores == 2 and t.totals.stored_blocks == 3


def test_present_blocks_are_not_stored_again() -> None:
    t, _ = tier()
    store(t, [1, 2], 0.0)
    assert t.prepare_store(0, [1, 2], [0, 0]) == 0  # pending counts as present
    tid = t.prepare_store(0, [2, 3], [0, 0])
    t.submit_prepared_stores(5.0)
    assert t.deadline(tid) == pytest.approx(6.0)  # one missing block only


def test_a_full_tier_evicts_least_recently_used_unpinned_blocks() -> None:
    t, events = tier(capacity=3, d2h=0.0)
    store(t, [1, 2, 3], 0.0)
    t.tick(0.0)
    t.touch(1)  # 2 is now the oldest, then 3, then 1
    store(t, [4], 1.0)
    t.tick(1.0)
    removed = [e for e in events if isinstance(e, RemovedBlocks)]
    assert [e.block_hashes for e in removed] == [(2,)] and removed[0].medium == "CPU"
    assert t.lookup(2) is Lookup.MISS and t.num_blocks == 3
    # A loading block is pinned: with 1 pinned and 3, 4 younger, room comes from 3.
    t.schedule_load(9, [1], 1.0, 1.0)
    store(t, [5], 1.0)
    assert t.lookup(1) is not Lookup.MISS and t.lookup(3) is Lookup.MISS


def test_a_store_without_room_changes_nothing() -> None:
    t, _ = tier(capacity=2)
    store(t, [1, 2], 0.0)  # both pending: not evictable
    assert t.prepare_store(0, [3], [0]) is None
    assert t.lookup(3) is Lookup.MISS and t.num_blocks == 2


def test_loads_wait_for_their_lane_and_their_not_before_time() -> None:
    t, _ = tier(capacity=8, d2h=0.0, h2d=2.0, latency=0.25)
    store(t, [1, 2, 3, 4], 0.0)
    assert len(t.tick(0.0)) == 0 and len(t.tick(0.25)) == 1  # the latency applies to stores too
    a = t.schedule_load(1, [1, 2], 10.0, 10.0)  # 2 blocks at 2 GB/s: 1 ms + latency
    b = t.schedule_load(2, [3], 10.0, 20.0)
    assert t.deadline(a) == pytest.approx(11.25) and t.deadline(b) == pytest.approx(20.75)
    t.cancel_load(b)  # at command time: never completes
    assert [x.transfer_id for x in t.tick(30.0)] == [a]
    assert t.totals.loads == 2 and t.totals.cancelled_loads == 1 and not t.busy


def test_zero_bandwidth_is_instantaneous() -> None:
    t, _ = tier(d2h=0.0, h2d=0.0)
    tid = store(t, [1], 7.0)
    assert t.deadline(tid) == 7.0 and t.tick(7.0)[0].transfer_id == tid
