"""``cluster.pools``: heterogeneous workers behind one router, with a per-pool report."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.replay.runner import simulate
from servesim.report.summary import format_table

BASE = """
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 2000
  timing_model: {type: fixed, prefill_ms: 8.0, decode_ms: 2.0}
workload:
  synthetic: {num_requests: 90, rate: 40.0, input_length: "uniform:64:512", output_length: "uniform:8:64",
              block_size: 16}
"""


def _load(tmp_path, cluster: str, name: str = "sim.yaml"):
    path = tmp_path / name
    path.write_text(BASE + cluster)
    return load_config(str(path))


def test_one_pool_is_the_plain_cluster(tmp_path):
    plain = simulate(_load(tmp_path, "cluster: {workers: 3, router: kv}\n", "a.yaml")).report
    pooled = simulate(_load(tmp_path, "cluster:\n  router: kv\n  pools: [{name: all, workers: 3}]\n",
                            "b.yaml")).report
    (pool,) = pooled.pop("pools")
    for rep in (plain, pooled):
        rep.pop("config")
    assert json.dumps(pooled, sort_keys=True) == json.dumps(plain, sort_keys=True)
    assert (pool["name"], pool["workers"], pool["gpus"], pool["completed"]) == ("all", 3, 3, 90)
    assert pool["mean_ttft_ms"] == plain["mean_ttft_ms"] and pool["p99_tpot_ms"] == plain["p99_tpot_ms"]
    assert pool["output_throughput"] == plain["output_throughput"]


POOLS = """
cluster:
  pools:
    - {name: fast, workers: 1}
    - {name: slow, workers: 2, engine: {timing_model: {prefill_ms: 40.0, decode_ms: 6.0}, dp_size: 1}}
"""


def test_each_pool_has_its_own_timing_and_report(tmp_path):
    loaded = _load(tmp_path, POOLS)
    result = simulate(loaded, record_token_times=True)
    fast, slow = result.report["pools"]
    assert (fast["name"], fast["workers"], slow["name"], slow["workers"]) == ("fast", 1, "slow", 2)
    # round robin: workers 0 (fast), 1 and 2 (slow) take every third request in turn
    assert (fast["completed"], slow["completed"]) == (30, 60)
    log = result.log
    for rid in range(log.n):
        gaps = [b - a for a, b in zip(log.token_times[rid], log.token_times[rid][1:], strict=False)]
        on_fast = log.worker[rid] == 0
        assert log.worker[rid] == rid % 3
        assert all(g == pytest.approx(2.0 if on_fast else 6.0) or g > 6.0 for g in gaps)
    assert slow["mean_tpot_ms"] > 2.5 * fast["mean_tpot_ms"]
    assert slow["mean_ttft_ms"] > fast["mean_ttft_ms"] + 30.0
    assert fast["output_throughput_per_gpu"] == pytest.approx(fast["output_throughput"])
    assert slow["output_throughput_per_gpu"] == pytest.approx(slow["output_throughput"] / 2)
    assert 0.0 < fast["utilization"] < slow["utilization"] <= 1.0
    table = format_table(result.report)
    assert "[fast] workers / GPUs:" in table and "[slow] completed:" in table


def test_utilization_is_the_same_stepping_and_with_runs(tmp_path, monkeypatch):
    with_runs = simulate(_load(tmp_path, POOLS)).report["pools"]
    monkeypatch.setenv("SERVESIM_RUNS", "0")
    stepped = simulate(_load(tmp_path, POOLS)).report["pools"]
    assert stepped == with_runs


@pytest.mark.parametrize(("cluster", "path", "message"), [
    ("cluster:\n  pools: [{name: a}, {name: a}]\n", "cluster.pools[1].name", "unique"),
    ("cluster:\n  pools: [{name: a}, {name: b, engine: {dp_size: 2}}]\n",
     "cluster.pools[1].engine.dp_size", "every pool must have engine.dp_size 1"),
    ("cluster:\n  pools: [{name: a, engine: {block_size: 32}}]\n",
     "cluster.pools[0].engine.block_size", "every pool must have engine.block_size 16"),
    ("cluster:\n  pools: [{name: a, workers: 0}]\n", "cluster.pools[0].workers", ">= 1"),
    ("cluster:\n  pools: [{name: a, engine: {max_num_seqs: 0}}]\n",
     "cluster.pools[0].engine.max_num_seqs", ">= 1"),
    ("cluster:\n  prefill_workers: 1\n  decode_workers: 1\n  pools: [{name: a}]\n", "cluster.pools",
     "cannot be combined"),
])
def test_bad_pools_are_config_errors(tmp_path, cluster, path, message):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, cluster)
    assert info.value.path == path and message in str(info.value)


def test_homogeneous_reports_do_not_mention_pools(tmp_path):
    loaded = _load(tmp_path, "cluster: {workers: 2}\n")
    assert "pools" not in loaded.resolved()["cluster"]
    assert "pools" not in simulate(loaded).report


def test_a_pools_timing_model_is_built_before_the_replay(tmp_path):
    # Like engine:'s, a pool's timing model is built when its engines are (servesim validate
    # builds it too, naming the plugin): the run fails under the pool's key, before any pass.
    profile = tmp_path / "missing.json"
    cluster = f"cluster:\n  pools: [{{name: a}}, {{name: b, engine: {{timing_model: {{type: interpolated, profile: {profile}}}}}}}]\n"
    loaded = _load(tmp_path, cluster)
    with pytest.raises(ConfigError) as info:
        simulate(loaded)
    assert info.value.path == "cluster.pools[1].engine.timing_model.profile"
    assert str(info.value) == (f"{tmp_path / 'sim.yaml'}: cluster.pools[1].engine.timing_model.profile: "
                               f"timing profile {str(profile)!r}: file not found")
