"""servesim-toy's paged backend (``toy_paged``, docs/writing-a-plugin.md "The KV block pool"):
core's block pool cycle pinned pass by pass, the backend kit, and a replay through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.cli.main import main
from servesim.config.engine import EngineConfig
from servesim.contract import Request, StoredBlocks
from servesim.testing import check_rank_conformance, engine_maker, run_trace
from servesim.timing import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_toy import PagedConfig, PagedToyRank

SHARED = list(range(1000, 1040))  # 40 tokens: two full blocks of 16 in common


def _prompts() -> list[Request]:
    return [Request(0, Tokens(SHARED + list(range(60))), 3),
            Request(1, Tokens(SHARED + list(range(500, 530))), 2),
            Request(2, Tokens(list(range(200))), 1)]


def test_the_pool_cycle_pass_by_pass() -> None:
    a, b, c = _prompts()
    engine = engine_maker(PagedToyRank, config=EngineConfig(block_size=16, num_gpu_blocks=8))()
    trace = run_trace(engine, [(0.0, a), (30.0, b), (31.0, c)])
    # 100 prompt tokens under a 64-token budget: two prefill chunks (10 ms each, FixedTiming),
    # the first token with the second chunk, then 1 ms decode passes
    assert trace.passes == [(0, 0.0, 10.0), (1, 10.0, 20.0), (2, 20.0, 21.0), (3, 21.0, 22.0),
                            (4, 30.0, 40.0), (5, 40.0, 41.0)]
    assert trace.tokens == {0: [20.0, 21.0, 22.0], 1: [40.0, 41.0], 2: []}
    # request 1 finds the two shared blocks request 0 left cached; request 2 (13 blocks) can
    # never fit in 8 and is rejected
    assert trace.admissions == [(0.0, 0, 0), (30.0, 1, 32)]
    assert trace.terminals == {0: [(22.0, False)], 1: [(41.0, False)], 2: [(41.0, True)]}
    names = {h: f"a{i}" for i, h in enumerate(a.prompt.block_hashes(16)[0])}
    names |= {h: f"b{i}" for i, h in enumerate(b.prompt.block_hashes(16)[0]) if h not in names}
    events = [(at, type(ev.data).__name__, names.get(ev.data.parent_hash),
               [names[blk.block_hash] for blk in ev.data.blocks])
              if isinstance(ev.data, StoredBlocks) else
              (at, type(ev.data).__name__, [names[h] for h in ev.data.block_hashes])
              for _, at, ev in trace.kv_events]
    assert events == [
        (10.0, "StoredBlocks", None, ["a0", "a1", "a2", "a3"]),  # finalized after chunk one
        (20.0, "StoredBlocks", "a3", ["a4", "a5"]),  # after chunk two; the 4 prompt tokens left stay private
        # request 1 needs 3 fresh blocks: the two free ones, then request 0's leaf, evicted
        (40.0, "RemovedBlocks", ["a5"]),
        (40.0, "StoredBlocks", "a1", ["b2", "b3"]),
    ]
    m = trace.metrics[0]
    assert (m.active_blocks, m.inactive_blocks, m.total_blocks) == (0, 7, 8)


def test_the_paged_toy_passes_the_backend_kit() -> None:
    report = check_rank_conformance(engine_maker(PagedToyRank))
    assert report.failures == [] and "kv_events" in report.checks
    tight = engine_maker(PagedToyRank, config=EngineConfig(block_size=8, num_gpu_blocks=30),
                         backend_config=PagedConfig(max_num_batched_tokens=20))
    assert check_rank_conformance(tight).ok


def test_a_replay_on_the_paged_toy_hits_the_prefix_cache(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "paged.yaml"
    cfg.write_text("engine: {backend: toy_paged, num_gpu_blocks: 2000, toy_paged: {max_num_batched_tokens: 256}}\n"
                   "cluster: {workers: 2, router: kv}\n"
                   "workload: {synthetic: {num_requests: 40, turns_per_session: 2}}\n")
    assert main(["validate", str(cfg)]) == 0
    assert "backend toy_paged (block_size 16, dp_size 1)" in capsys.readouterr().out
    assert main(["run", str(cfg), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completed"] == 40 and report["failed"] == 0
    # the second turn of each session finds its first turn's prompt cached on the worker the
    # KV router picks
    assert (report["prefix_cache_hit_rate"], report["mean_ttft_ms"]) == (0.359983, 236.914199)


def test_a_pass_is_priced_from_its_shape() -> None:
    """Decode contexts are the lengths before the pass (aisimulate-engine.md §6.3: after a
    4-token prompt and one sampled token the next decode call is ``(1, 5, 5)``), prompt chunks
    give the integer-division means, and a two-method model is priced through its default
    ``predict_pass_ms``."""
    calls: list[tuple[str, tuple[int, ...]]] = []

    class Recording(FixedTiming):
        def predict_prefill_ms(self, *args: int) -> float:
            calls.append(("prefill", args))
            return super().predict_prefill_ms(*args)

        def predict_decode_ms(self, *args: int) -> float:
            calls.append(("decode", args))
            return super().predict_decode_ms(*args)

    engine = engine_maker(PagedToyRank, config=EngineConfig(block_size=4, num_gpu_blocks=8),
                          timing=Recording(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0)),
                          backend_config=PagedConfig(max_num_batched_tokens=6))()
    trace = run_trace(engine, [(0.0, Request(0, Tokens([1, 2, 3, 4]), 3)),
                               (0.0, Request(1, Tokens(list(range(10, 16))), 2))])
    # pass 0: request 0's 4 tokens and 2 of request 1's 6 under a 6-token budget; pass 1:
    # request 0 decodes (context 5) and request 1's last 4 tokens take the remaining 5
    assert calls == [("prefill", (2, 3, 0)), ("prefill", (1, 6, 2)), ("decode", (1, 5, 5, 32)),
                     ("decode", (2, 13, 6, 32))]
    assert trace.tokens == {0: [10.0, 21.0, 22.0], 1: [21.0, 22.0]}


def test_the_paged_toy_drives_a_record_eviction_policy(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``eviction_support`` names "records" too: make_block_pool gives a record policy its
    record-keeping pool, which reads ``pool.now``."""
    cfg = tmp_path / "lineage.yaml"
    cfg.write_text("engine: {backend: toy_paged, num_gpu_blocks: 300, eviction_policy: lineage,"
                   " toy_paged: {max_num_batched_tokens: 256}}\n"
                   "workload: {synthetic: {num_requests: 40, turns_per_session: 2}}\n")
    assert main(["run", str(cfg), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["completed"], report["failed"]) == (40, 0)
    assert report["prefix_cache_hit_rate"] == 0.081968
