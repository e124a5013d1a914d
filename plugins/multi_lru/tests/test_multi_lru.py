"""multi_lru: tiers by hit count (coldest first, insertion order inside a tier), promotion by
hits on blocks in use, options with key paths; the check kit; one replay per backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.config.loader import load_config
from servesim.kv.eviction import EvictableBlock
from servesim.kv.eviction_records import RecordBlockPool
from servesim.kv.pool import BlockTable
from servesim.testing import check_eviction_policy
from servesim.testing.eviction_kit import replay_figures
from servesim_multi_lru import MultiLruConfig, MultiLruEviction


def test_tiers_then_insertion_order() -> None:
    pol = MultiLruEviction()
    hits = [15, 0, 6, 2, 1, 5, 0]
    recs = [EvictableBlock(i, i, None, 0, 16, hit_count=h) for i, h in enumerate(hits)]
    assert [pol.tier(r) for r in recs] == [3, 0, 2, 1, 0, 1, 0]
    for r in recs:
        pol.insert(r, 0.0)
    assert [pol.evict(1.0).block_id for _ in recs] == [1, 4, 6, 3, 5, 2, 0]


def test_custom_thresholds_make_fewer_tiers() -> None:
    pol = MultiLruEviction(MultiLruConfig(thresholds=(1,)))
    assert pol.config.tiers == 2
    assert [pol.tier(EvictableBlock(0, 0, None, 0, 1, hit_count=h)) for h in (0, 1, 9)] == [0, 1, 1]


def test_hits_in_use_promote_a_block_when_it_is_released() -> None:
    pool = RecordBlockPool(3, policy=MultiLruEviction(MultiLruConfig(thresholds=(2,))), block_size=4)
    shared = [BlockTable(prompt_len=4) for _ in range(3)]
    assert pool.allocate(shared[0], 1)
    pool.finalize(shared[0], 1, [5], [5])
    for t in shared[1:]:
        assert pool.allocate(t, 1, [5])  # two hits while block 0 is in use
    lone = BlockTable(prompt_len=4)
    assert pool.allocate(lone, 1)
    pool.finalize(lone, 1, [6], [6])
    for t in shared:
        pool.release(t)  # block 0 becomes evictable first, but in the warm tier
    pool.release(lone)
    assert pool.records[0].hit_count == 2 and pool.records[1].hit_count == 0
    grab = BlockTable()
    assert pool.allocate(grab, 2)  # the free block, then the cold block 1
    assert grab.ids == [2, 1] and pool.is_cached(5) and not pool.is_cached(6)
    assert (pool.num_free, pool.num_inactive, pool.num_active) == (0, 1, 2)


def test_options_and_their_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load_config(None, ["engine.eviction_policy={type: multi_lru, thresholds: [1, 3]}"])
    policy = loaded.eviction_factory()
    assert isinstance(policy, MultiLruEviction) and policy.thresholds == [1, 3]
    cfg = tmp_path / "sim.yaml"
    cases = [
        ("{type: multi_lru, thresholds: [3, 1]}",
         "engine.eviction_policy.thresholds: expected strictly ascending thresholds, got [3, 1]"),
        ("{type: multi_lru, tiers: 3}", "engine.eviction_policy.tiers: unknown key"),
        ("{type: multi_lru, thresholds: [a]}", "engine.eviction_policy.thresholds[0]: expected an integer"),
    ]
    for spec, expected in cases:
        cfg.write_text(f"engine: {{eviction_policy: {spec}}}\n")
        assert main(["validate", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"servesim: error: {cfg}: {expected}"), err


def test_passes_the_check_kit() -> None:
    report = check_eviction_policy(MultiLruEviction)
    assert report.failures == [] and len(report.checks) == 7


@pytest.mark.parametrize(
    ("backend", "hit_rate", "preemptions", "p99_ttft"),
    [("vllm", 0.213414, 13, 33339.691607), ("trtllm", 0.18664, 0, 34714.330012),
     ("sglang", 0.161819, 5, 30601.019265)],
)
def test_replay(backend: str, hit_rate: float, preemptions: int, p99_ttft: float) -> None:
    assert replay_figures(backend, "multi_lru") == (hit_rate, preemptions, p99_ttft)
