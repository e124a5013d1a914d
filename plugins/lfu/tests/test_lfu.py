"""lfu: fewest hits first, then the least recently accessed; hits on blocks in use count;
SGLang's radix leaf pages; the check kit; one replay per backend."""

from __future__ import annotations

import pytest
from servesim.kv.eviction import EvictableBlock
from servesim.kv.eviction_records import RecordBlockPool
from servesim.kv.pool import BlockTable
from servesim.testing import check_eviction_policy
from servesim.testing.eviction_kit import replay_figures
from servesim_lfu import LfuEviction
from servesim_sglang.radix_records import RecordRadixCache


def test_order_is_hits_then_last_access_then_insertion() -> None:
    pol = LfuEviction()
    rows = [(0, 2, 1.0), (1, 0, 5.0), (2, 1, 0.0), (3, 0, 2.0), (4, 0, 2.0)]
    for i, hits, t in rows:
        pol.insert(EvictableBlock(i, 100 + i, None, 0, 16, hit_count=hits, last_access_ms=t), t)
    assert [pol.evict(9.0).block_id for _ in range(5)] == [3, 4, 1, 2, 0]


def test_a_block_reused_while_in_use_outlives_a_colder_one() -> None:
    pool = RecordBlockPool(4, policy=LfuEviction(), block_size=4)
    hot, cold = BlockTable(prompt_len=4), BlockTable(prompt_len=4)
    pool.now = 1.0
    assert pool.allocate(hot, 1)
    pool.finalize(hot, 1, [7], [7])
    again = BlockTable(prompt_len=4)
    pool.now = 2.0
    assert pool.allocate(again, 1, [7])  # a hit on a block in use
    assert pool.records[0].hit_count == 1 and pool.records[0].ref_count == 2
    assert pool.allocate(cold, 1)
    pool.finalize(cold, 1, [8], [8])
    pool.now = 3.0
    for t in (cold, again, hot):  # the hot block is released last, the cold one first
        pool.release(t)
    assert pool.records[0].last_access_ms == 3.0
    grab = BlockTable()
    assert pool.allocate(grab, 3)  # two free blocks, then the cold block (0 hits)
    assert grab.ids == [2, 3, 1]
    assert pool.records[1] is None and pool.is_cached(7) and not pool.is_cached(8)
    assert (pool.num_free, pool.num_inactive, pool.num_active) == (0, 1, 3)


def test_radix_leaf_pages_by_hits() -> None:
    cache = RecordRadixCache(8, 1, policy=LfuEviction())
    a = [1, 2, 3]
    b = [1, 2, 9]
    lease, prefix = cache.acquire(a, 3, 3, prompt_len=3)
    assert prefix == 0
    cache.finish(lease, a, 3)
    lease, prefix = cache.acquire(b, 3, 3, prompt_len=3)  # matches [1, 2]: hits on that node
    assert prefix == 2
    cache.finish(lease, b, 3)
    assert cache.evictable_size == 4 and cache.free_pages == 4
    # Leaf pages: 3 and 9 (no hits), then [1, 2]'s last page once both are gone.
    assert cache.evict(3) == 3
    assert cache.match_len([1, 2, 3], 3) == 1 and cache.match_len([1, 2, 9], 3) == 1
    assert cache.evictable_size == 1 and cache.free_pages == 7


def test_passes_the_check_kit() -> None:
    report = check_eviction_policy(LfuEviction)
    assert report.failures == [] and len(report.checks) == 7


@pytest.mark.parametrize(
    ("backend", "hit_rate", "preemptions", "p99_ttft"),
    [("vllm", 0.227485, 13, 33328.913257), ("trtllm", 0.213805, 0, 34696.977833),
     ("sglang", 0.171787, 5, 30598.668547)],
)
def test_replay(backend: str, hit_rate: float, preemptions: int, p99_ttft: float) -> None:
    assert replay_figures(backend, "lfu") == (hit_rate, preemptions, p99_ttft)
