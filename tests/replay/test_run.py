"""From YAML to report through the real loader, with the toy rank registered as a backend."""

from __future__ import annotations

import json

import pytest
from replay_toy import ToyRank
from servesim._markers import hookimpl
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.plugins import Plugins, make_plugin_manager
from servesim.replay.runner import simulate
from servesim.report.summary import dumps


class _ToyPlugin:
    @hookimpl
    def servesim_register_backends(self, registry):
        registry.add("replaytoy", ToyRank)


def plugins() -> Plugins:
    pm = make_plugin_manager(autoload=False)
    pm.register(_ToyPlugin(), name="replaytoy")
    return Plugins(pm)


def write_trace(path, n: int = 12, gap_ms: int = 5) -> str:
    lines = [
        json.dumps({"timestamp": gap_ms * i, "input_length": 16, "output_length": 1 + i % 3,
                    "hash_ids": [i % 3, 100 + i]})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def config(tmp_path, trace: str, extra: str = "") -> str:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(
        f"""
engine:
  backend: replaytoy
  block_size: 4
  timing_model: {{type: fixed, prefill_ms: 10.0, decode_ms: 1.0}}
cluster:
  workers: 2
  router: kv
workload:
  trace: {{path: {trace}, trace_block_size: 8}}
report:
  sla_ttft_ms: 15
sinks:
  kv_events: [{{type: jsonl, path: {tmp_path / "kv.jsonl"}}}]
  fpm: [{{type: jsonl, path: {tmp_path / "fpm.jsonl"}}}]
{extra}
"""
    )
    return str(cfg)


def test_trace_run_with_kv_router_and_sinks(tmp_path):
    cfg = config(tmp_path, write_trace(tmp_path / "t.jsonl"))
    res = simulate(load_config(cfg, [], plugins()))
    rep = res.report
    assert rep["completed"] == 12 and rep["total_input_tokens"] == 12 * 16
    assert rep["total_output_tokens"] == sum(1 + i % 3 for i in range(12))
    # requests overlap in time here, so load competes with the 8-token prefixes
    assert res.log.worker[:4] == [0, 1, 0, 1]
    assert rep["config"]["cluster"]["router"] == "kv"
    assert rep["goodput_completed"] is not None
    kv = [json.loads(x) for x in (tmp_path / "kv.jsonl").read_text().splitlines()]
    assert kv and all(e["type"] == "BlockStored" for e in kv)
    fpm = (tmp_path / "fpm.jsonl").read_text().splitlines()
    assert len(fpm) == res.passes


def test_kv_router_keeps_prefix_groups_on_one_worker_when_idle(tmp_path):
    # 30 ms apart every request finishes before the next arrives: only overlap matters
    cfg = config(tmp_path, write_trace(tmp_path / "t.jsonl", gap_ms=30))
    kv = simulate(load_config(cfg, [], plugins()))
    groups: dict[int, set[int]] = {}
    for rid in range(12):
        groups.setdefault(rid % 3, set()).add(kv.log.worker[rid])
    assert [sorted(groups[g]) for g in range(3)] == [[0], [1], [0]]
    assert kv.report["prefix_cache_hit_rate"] == round(9 * 8 / (12 * 16), 6)
    rr = simulate(load_config(cfg, ["cluster.router=round_robin"], plugins())).report
    assert rr["prefix_cache_hit_rate"] == round(6 * 8 / (12 * 16), 6)


def test_concurrency_and_speedup_from_config(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", 4)
    cfg = config(tmp_path, trace, "")
    loaded = load_config(cfg, ["workload.concurrency=1", "cluster.router=round_robin"], plugins())
    res = simulate(loaded)
    arr, done = res.log.arrival, res.log.done
    assert arr[0] == 0.0 and all(arr[i + 1] == done[i] for i in range(3))
    loaded = load_config(cfg, ["workload.arrival_speedup_ratio=5"], plugins())
    assert simulate(loaded).log.arrival == [0.0, 1.0, 2.0, 3.0]


def test_max_concurrency_from_config(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", 4, gap_ms=1)
    cfg = config(tmp_path, trace, "")
    sets = ["cluster.router=round_robin"]
    free = simulate(load_config(cfg, sets, plugins())).log
    assert free.arrival == [0.0, 1.0, 2.0, 3.0]
    res = simulate(load_config(cfg, [*sets, "workload.max_concurrency=1"], plugins()))
    arr, done = res.log.arrival, res.log.done
    # due 1 ms apart, each waits for the one before it to finish
    assert arr[0] == 0.0 and all(arr[i + 1] == done[i] for i in range(3))
    assert res.report["completed"] == 4
    with pytest.raises(ConfigError, match="expected either 'concurrency'"):
        load_config(cfg, ["workload.max_concurrency=1", "workload.concurrency=1"], plugins())
    with pytest.raises(ConfigError, match="workload.max_concurrency"):
        load_config(cfg, ["workload.max_concurrency=0"], plugins())


def test_synthetic_run_is_byte_deterministic(tmp_path):
    cfg = config(tmp_path, "unused")
    sets = ["workload.trace=null", "workload.synthetic.num_requests=40",
            "workload.synthetic.input_length=uniform:8:64", "workload.synthetic.block_size=8"]
    a = dumps(simulate(load_config(cfg, sets, plugins())).report)
    b = dumps(simulate(load_config(cfg, sets, plugins())).report)
    assert a == b
    c = dumps(simulate(load_config(cfg, [*sets, "workload.seed=1"], plugins())).report)
    assert c != a


def test_half_a_disaggregated_split_is_refused_with_a_key_path(tmp_path):
    cfg = config(tmp_path, write_trace(tmp_path / "t.jsonl", 2))
    with pytest.raises(ConfigError) as info:
        load_config(cfg, ["cluster.prefill_workers=1"], plugins())
    assert info.value.path == "cluster.decode_workers"


def test_a_replay_collects_garbage_less_often_and_restores_the_thresholds(tmp_path, monkeypatch):
    """simulate raises the collector's thresholds for the replay (never lowering one) and puts
    the caller's back afterwards, also when the run fails; thresholds of 0 (collection off)
    stay 0."""
    import gc

    from servesim.replay import runner

    seen = []

    def fake(*_args):
        seen.append(gc.get_threshold())
        raise ConfigError("stop here")

    before = gc.get_threshold()
    cfg = load_config(config(tmp_path, write_trace(tmp_path / "t.jsonl")), [], plugins())
    monkeypatch.setattr(runner, "_simulate", fake)
    try:
        gc.set_threshold(700, 10, 200)
        with pytest.raises(ConfigError):
            simulate(cfg)
        assert gc.get_threshold() == (700, 10, 200)
        gc.set_threshold(0, 10, 10)
        with pytest.raises(ConfigError):
            simulate(cfg)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)
    assert seen == [(10_000, 50, 200), (0, 10, 10)]
