"""lineage: leaf blocks first, a parent queued again with its own tick; block accounting on a
record pool; the check kit; one replay per backend."""

from __future__ import annotations

import pytest
from servesim.kv.eviction import EvictableBlock
from servesim.kv.eviction_records import RecordBlockPool
from servesim.kv.pool import BlockTable
from servesim.testing import check_eviction_policy
from servesim.testing.eviction_kit import replay_figures
from servesim_lineage import LineageEviction


def rec(i: int, h: int, parent: int | None, pos: int) -> EvictableBlock:
    return EvictableBlock(i, h, parent, pos, 16)


def test_leaves_go_first_and_a_parent_keeps_its_older_tick() -> None:
    pol = LineageEviction()
    a0, a1, a2, b0 = rec(0, 10, None, 0), rec(1, 11, 10, 1), rec(2, 12, 11, 2), rec(3, 20, None, 0)
    for i, r in enumerate((a0, a1, a2, b0)):  # root first: a0 is the oldest
        pol.insert(r, float(i))
    assert len(pol) == 4
    # a2 is the oldest leaf; then a1 and a0 become leaves with their own, older ticks.
    assert [pol.evict(9.0).block_id for _ in range(4)] == [2, 1, 0, 3]
    assert len(pol) == 0


def test_a_shared_parent_waits_for_every_child() -> None:
    pol = LineageEviction()
    p, x, y, q = rec(0, 1, None, 0), rec(1, 2, 1, 1), rec(2, 3, 1, 1), rec(3, 4, None, 0)
    for r in (p, x, q, y):
        pol.insert(r, 0.0)
    pol.remove(x, 1.0)  # x reused: p still has y
    assert [pol.evict(2.0).block_id for _ in range(3)] == [3, 2, 0]


def test_block_accounting_on_a_record_pool() -> None:
    pool = RecordBlockPool(6, policy=LineageEviction(), block_size=4, emit_events=True)
    a, b = BlockTable(prompt_len=8), BlockTable(prompt_len=8)
    assert pool.allocate(a, 3)
    pool.finalize(a, 3, [101, 102, 103], [1, 2, 3])
    assert pool.allocate(b, 3, [101])  # shares block 0
    pool.finalize(b, 3, [101, 202, 203], [1, 5, 6])
    recs = [pool.records[i] for i in range(6)]
    assert [(r.block_hash, r.parent_hash, r.position, r.generated) for r in recs if r] == [
        (101, None, 0, False), (102, 101, 1, False), (103, 102, 2, True),
        (202, 101, 1, False), (203, 202, 2, True),
    ]
    assert recs[0].hit_count == 1 and recs[0].ref_count == 2
    pool.release(a)
    pool.release(b)
    assert (pool.num_free, pool.num_inactive, pool.num_active) == (1, 5, 0)
    pool.drain_events()
    c = BlockTable()
    assert pool.allocate(c, 4)  # the free block, then leaves 103, 102 (a's tail) and 203
    assert c.ids == [5, 2, 1, 4]
    assert [e.data.block_hashes for e in pool.drain_events()] == [(103,), (102,), (203,)]
    assert (pool.num_free, pool.num_inactive, pool.num_active) == (0, 2, 4)


def test_passes_the_check_kit() -> None:
    report = check_eviction_policy(LineageEviction)
    assert report.failures == [] and len(report.checks) == 7


@pytest.mark.parametrize(
    ("backend", "hit_rate", "preemptions", "p99_ttft"),
    [("vllm", 0.205597, 13, 33345.369743), ("trtllm", 0.137781, 0, 34745.295961),
     ("sglang", 0.161624, 6, 29871.418206)],
)
def test_replay(backend: str, hit_rate: float, preemptions: int, p99_ttft: float) -> None:
    assert replay_figures(backend, "lineage") == (hit_rate, preemptions, p99_ttft)
