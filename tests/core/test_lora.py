"""LoRA settings and adapter caches (servesim.mechanics.lora), the synthetic adapter mix
(servesim.workload.adapter_mix) and the resolved configuration without LoRA."""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim import ConfigError
from servesim.config.loader import load_config
from servesim.config.sections import SyntheticConfig
from servesim.mechanics.lora import (
    AdapterCache,
    AdapterTable,
    LoraLoading,
    LoraModule,
    transfer_ms,
)
from servesim.timing import FixedTiming
from servesim.workload.synthetic import generate

MB = 1_000_000


def _cache(slots: int, cpu: int, **loading: float) -> AdapterCache:
    table = AdapterTable([LoraModule(id=2, rank=8), LoraModule(id=3, name="sql", size_bytes=6 * MB)],
                         16, LoraLoading(bytes_per_rank=MB, **loading))
    return AdapterCache(table, slots, cpu)


def test_adapters_default_to_the_max_rank_and_rank_times_bytes_per_rank() -> None:
    table = _cache(1, 1).table
    assert (table.get(1).name, table.get(1).rank, table.get(1).size_bytes) == ("adapter-1", 16, 16 * MB)
    assert (table.get(2).rank, table.get(2).size_bytes) == (8, 8 * MB)
    assert (table.get(3).name, table.get(3).size_bytes) == ("sql", 6 * MB)


def test_loads_follow_vllms_lru_caches() -> None:
    """GPU slots 2, host cache 3 (LRUCacheWorkerLoRAManager): disk reads for adapters not in
    host memory, GPU copies for adapters without a slot, least recently used evicted first,
    a host eviction also freeing the adapter's slot."""
    c = _cache(2, 3, disk_bandwidth=1.0, cpu_bandwidth=10.0)
    # 1 (16 MB) and 2 (8 MB) from disk and into slots: 16+8 ms disk, 1.6+0.8 ms copies
    assert c.activate([1, 2]) == pytest.approx(24 + 2.4)
    assert c.activate([2, 1]) == 0.0  # both resident; 1 is now the most recent
    # 3 (6 MB): disk read, host cache has room; slot: evicts 2 (least recent)
    assert c.activate([3]) == pytest.approx(6 + 0.6)
    assert list(c.gpu) == [1, 3] and list(c.cpu) == [2, 1, 3]
    # 2 again: in host memory, copy only; evicts slot of 1
    assert c.activate([2]) == pytest.approx(0.8)
    assert list(c.gpu) == [3, 2]
    # 4 (16 MB): host cache full, evicts 1 (least recent in host memory, no slot); slot evicts 3
    assert c.activate([4]) == pytest.approx(16 + 1.6)
    assert list(c.cpu) == [3, 2, 4] and list(c.gpu) == [2, 4]
    # 1: host evicts 3 (which holds no slot now), slot evicts 2
    c.activate([1])
    assert list(c.cpu) == [2, 4, 1] and list(c.gpu) == [4, 1]
    st = c.stats
    assert (st.disk_loads, st.gpu_loads, st.cpu_evictions, st.gpu_evictions) == (5, 6, 2, 4)
    assert st.load_ms == pytest.approx(24 + 2.4 + 6.6 + 0.8 + 17.6 + 17.6)


def test_a_host_eviction_frees_the_slot_of_an_active_adapter() -> None:
    c = _cache(2, 2)
    c.activate([1, 2])
    c.activate([3])  # host evicts 1, which held a slot: the slot is free, so 3 evicts nothing more
    assert list(c.cpu) == [2, 3] and list(c.gpu) == [2, 3]
    assert (c.stats.cpu_evictions, c.stats.gpu_evictions) == (1, 1)


def test_transfer_time_is_bytes_over_decimal_gigabytes() -> None:
    assert transfer_ms(84 * MB, 2.0) == 42.0 and transfer_ms(MB, 0) == 0.0


def test_the_default_lora_overhead_is_per_adapter_and_linear_in_rank() -> None:
    assert FixedTiming().predict_lora_ms([16], 100) == pytest.approx(0.1)
    assert FixedTiming().predict_lora_ms([8, 32, 16], 1) == pytest.approx(0.05 + 0.2 + 0.1)


BASE = """
engine:
  num_gpu_blocks: 500
workload:
  synthetic: {num_requests: 30, rate: 10, input_length: "uniform:64:256", output_length: "uniform:8:16"}
"""


def _load(tmp_path: Path, text: str, sets: list[str] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(str(path), sets or [])


def test_without_lora_the_resolved_configuration_has_no_lora_keys(tmp_path: Path) -> None:
    resolved = _load(tmp_path, BASE).resolved()
    assert not [k for k in resolved["engine"] if "lora" in k]
    assert not [k for k in resolved["workload"]["synthetic"] if "lora" in k]
    on = _load(tmp_path, BASE, ["engine.enable_lora=true", "engine.max_loras=4",
                                "workload.synthetic.lora_adapters=8"]).resolved()
    assert on["engine"]["max_loras"] == 4 and on["engine"]["max_cpu_loras"] is None
    assert on["engine"]["lora_loading"] == {"bytes_per_rank": 5_242_880, "disk_bandwidth": 2.0,
                                            "cpu_bandwidth": 12.0}
    assert on["workload"]["synthetic"]["lora_adapters"] == 8


@pytest.mark.parametrize(("sets", "path", "words"), [
    (["engine.max_loras=0"], "engine.max_loras", "integer >= 1"),
    (["engine.max_loras=4", "engine.max_cpu_loras=2"], "engine.max_cpu_loras", ">= max_loras (4)"),
    (["engine.max_lora_rank=12"], "engine.max_lora_rank", "one of 1, 8, 16"),
    (["engine.lora_modules=[{id: 0}]"], "engine.lora_modules[0].id", "integer >= 1"),
    (["engine.lora_modules=[{id: 1}, {id: 1}]"], "engine.lora_modules[1].id", "listed twice"),
    (["engine.lora_modules=[{id: 1, rank: 32}]"], "engine.lora_modules[0].rank", "max_lora_rank (16)"),
    (["engine.lora_loading.disk_bandwidth=-1"], "engine.lora_loading.disk_bandwidth", ">= 0"),
    (["workload.synthetic.lora_fraction=2"], "workload.synthetic.lora_fraction", "[0, 1]"),
])
def test_bad_lora_settings_name_their_key(tmp_path: Path, sets: list[str], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, BASE, sets)
    assert path in str(err.value) and words in str(err.value)


def _mix(**kw: object) -> list[int]:
    cfg = SyntheticConfig(num_requests=400, prefix_groups=0, **kw)  # type: ignore[arg-type]
    return [t.lora for s in generate(cfg, seed=3).sessions for t in s.turns]


def test_the_adapter_mix_leaves_the_rest_of_the_workload_alone() -> None:
    plain = generate(SyntheticConfig(num_requests=50), seed=1)
    mixed = generate(SyntheticConfig(num_requests=50, lora_adapters=5), seed=1)
    a = [(t.input_length, t.output_length, s.start_ms) for s in plain.sessions for t in s.turns]
    b = [(t.input_length, t.output_length, s.start_ms) for s in mixed.sessions for t in s.turns]
    assert a == b and {t.lora for s in plain.sessions for t in s.turns} == {0}


def test_uniform_and_zipf_popularity() -> None:
    uniform = _mix(lora_adapters=4)
    assert set(uniform) == {1, 2, 3, 4} and all(70 < uniform.count(k) < 130 for k in range(1, 5))
    zipf = _mix(lora_adapters=8, lora_popularity="zipf:1.2")
    counts = [zipf.count(k) for k in range(1, 9)]
    assert counts[0] > 2 * counts[3] > 0 and counts[0] == max(counts)
    half = _mix(lora_adapters=4, lora_fraction=0.5)
    assert 150 < half.count(0) < 250


def test_a_bad_popularity_names_its_key() -> None:
    with pytest.raises(ConfigError, match="workload.synthetic.lora_popularity"):
        _mix(lora_adapters=4, lora_popularity="zipf:x")
