"""LoRA in the vllm rank (servesim_vllm.lora): the max_loras skip, adapter loads and the
per-adapter overhead lengthening passes, request counts, and runs declined."""

from __future__ import annotations

import pytest
from servesim.mechanics.lora import LoraLoading, LoraModule
from servesim.testing.driver import drive
from servesim.timing import FixedTiming, FixedTimingConfig
from vllm_helpers import make_engine, req

MB = 1_000_000
TIMING = FixedTiming(FixedTimingConfig(10.0, 2.0))
# 10 MB per rank: adapter 1 (rank 16) is 160 MB, adapter 2 (rank 8) 80 MB.
LOADING = LoraLoading(bytes_per_rank=10 * MB, disk_bandwidth=1.0, cpu_bandwidth=10.0)


def _engine(**kw: object):  # type: ignore[no-untyped-def]
    base = dict(block_size=4, enable_lora=True, max_loras=1, max_cpu_loras=2,
                lora_modules=(LoraModule(id=2, rank=8),), lora_loading=LOADING)
    return make_engine(TIMING, **{**base, **kw})


def test_one_slot_runs_one_adapter_at_a_time_and_base_requests_pass_skipped_ones() -> None:
    arrivals = [(0.0, req(1, 8, 2, lora=1)), (0.0, req(2, 8, 2, lora=2)), (0.0, req(3, 8, 2))]
    r = drive(_engine(), arrivals)
    first = r.passes[0].by_rank[0].effects.admissions
    assert [a.request_id for a in first] == [1, 3]  # 2's adapter would be a second one
    # pass 1: prefill 1 and 3 (10 ms) + adapter 1 from disk (160 ms) and into its slot (16 ms)
    # + overhead 0.1 ms (rank 16)
    assert r.requests[1].token_times[0] == pytest.approx(10 + 160 + 16 + 0.1)
    # 2 is admitted once 1 finished (pass 2 decodes 1 and 3; 1's token is its last)
    assert r.requests[2].token_times[0] > r.requests[1].completed_ms


def _lora_cache(engine):  # type: ignore[no-untyped-def]
    return engine.ranks[0].lora_cache


def test_loads_evictions_and_requests_are_counted() -> None:
    engine = _engine()
    arrivals = [(0.0, req(1, 8, 2, lora=1)), (0.0, req(2, 8, 2, lora=2)), (0.0, req(3, 8, 2, lora=1)),
                (0.0, req(4, 8, 2))]
    drive(engine, arrivals)
    st = _lora_cache(engine).stats
    # adapter 1 (requests 1, 3), then 2: two disk reads, two slot copies, one slot eviction
    assert (st.disk_loads, st.gpu_loads, st.cpu_evictions, st.gpu_evictions) == (2, 2, 0, 1)
    assert st.load_ms == pytest.approx(160 + 16 + 80 + 8)
    assert st.requests == {1: 2, 0: 1, 2: 1}


def test_passes_without_adapters_cost_nothing_more() -> None:
    plain = drive(make_engine(TIMING, block_size=4), [(0.0, req(1, 8, 3))])
    lora = drive(_engine(), [(0.0, req(1, 8, 3))])
    assert lora.requests[1].token_times == plain.requests[1].token_times


def test_runs_are_declined_with_lora() -> None:
    engine = _engine(max_loras=2)
    arrivals = [(0.0, req(i, 8, 40, lora=1 + i % 2)) for i in range(4)]
    r = drive(engine, arrivals, runs=True)
    assert r.runs == [] and len(r.passes) >= 40
    assert drive(make_engine(TIMING, block_size=4), [(0.0, req(i, 8, 40)) for i in range(4)],
                 runs=True).runs  # the same batch without LoRA runs


def test_stored_events_name_the_adapter() -> None:
    """vLLM's BlockStored.lora_id and lora_name: a LoRA request's blocks carry its adapter's
    id and served name (lora_modules' name, else adapter-<id>), the base model's none; equal
    prompts under two adapters store distinct hashes."""
    engine = _engine(max_loras=2, emit_kv_events=True,
                     lora_modules=(LoraModule(id=2, rank=8, name="sql"),))
    prompt = list(range(8))
    r = drive(engine, [(0.0, req(1, prompt, 1, lora=1)), (0.0, req(2, prompt, 1, lora=2)),
                       (0.0, req(3, prompt, 1))])
    stored = [e.data for c in r.completions for rc in c.by_rank for e in rc.effects.kv_events]
    stored += [e.data for p in r.passes for rp in p.by_rank for e in rp.effects.kv_events]
    by_lora = {s.lora_id: [b.block_hash for b in s.blocks] for s in stored}
    assert set(by_lora) == {1, 2, None}
    assert {(s.lora_id, s.lora_name) for s in stored} == {(1, "adapter-1"), (2, "sql"), (None, None)}
    assert len({tuple(v) for v in by_lora.values()}) == 3  # no block shared across adapters
    assert [b.tokens_hash for s in stored if s.lora_id == 1 for b in s.blocks] == \
        [b.tokens_hash for s in stored if s.lora_id is None for b in s.blocks]


def test_lora_with_the_host_tier_is_a_config_error() -> None:
    from servesim.config.engine import EngineConfig
    from servesim.kv.host_tier import NativeHostOffloadConfig
    from servesim_vllm.rank import VllmRank

    cfg = EngineConfig(block_size=4, enable_lora=True, kv_bytes_per_token=100.0,
                       native_host_offload=NativeHostOffloadConfig(num_host_blocks=10))
    problems = VllmRank.validate_config(cfg, None)
    assert ("engine.enable_lora", "LoRA is not modelled with native_host_offload") in problems
