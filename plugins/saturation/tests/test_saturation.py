"""saturation: the analyzer's rules on hand-made snapshots, the planner check kit, and a
replay through a burst."""

from __future__ import annotations

import pytest
from servesim.config.loader import load_config
from servesim.replay.planning import Percentiles, PoolSnapshot, WorkerSnapshot
from servesim.replay.runner import simulate
from servesim.testing import check_planner
from servesim_saturation import SaturationConfig, SaturationPlanner


def pool(*workers: tuple[float, int], starting: int = 0) -> PoolSnapshot:
    ws = tuple(WorkerSnapshot(i, "ready", kv, q, kv, q) for i, (kv, q) in enumerate(workers))
    return PoolSnapshot("p", starting, 0, len(ws), 0, 0, 0, 0, 0, 0.0, Percentiles(), Percentiles(),
                        0, 0.0, 0.0, workers=ws)


@pytest.mark.parametrize(("snap", "delta"), [
    (pool((0.3, 0), (0.3, 0)), -1),  # one fewer: kv 0.6 (spare 0.2), queue 0 (spare 5)
    (pool((0.5, 1), (0.6, 1)), 0),  # 1.1 kv over one worker: spare -0.3 < 0.1, keep both
    (pool((0.75, 0), (0.2, 0)), 0),  # average spare kv 0.325: no scale-up; one fewer: 0.85
    (pool((0.75, 0), (0.75, 0)), 1),  # average spare kv 0.05 < 0.1
    (pool((0.3, 3), (0.3, 2)), 1),  # average spare queue 2.5 < 3
    (pool((0.9, 0), (0.3, 6)), 1),  # every worker saturated
    (pool((0.9, 0), (0.3, 6), starting=1), 0),  # ... but one is on its way
    (pool((0.9, 0), (0.3, 0)), 0),  # one non-saturated worker with spare: no removal
])
def test_the_analyzer_rules(snap, delta):
    assert SaturationPlanner(None, {"p": 2}, 5.0).decide(snap)[0] == delta


def test_thresholds_are_options():
    cfg = SaturationConfig(kv_cache_threshold=0.95, kv_spare_trigger=0.05)
    assert SaturationPlanner(cfg, {"p": 2}, 5.0).decide(pool((0.75, 0), (0.75, 0)))[0] == 0


def test_the_planner_kit_passes():
    assert check_planner(SaturationPlanner).ok


BURST = """
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 600
  max_num_seqs: 16
  timing_model: {type: fixed, prefill_ms: 20.0, decode_ms: 6.0}
cluster: {workers: 1, router: kv}
workload:
  synthetic: {num_requests: 240, rate: 60.0, input_length: "uniform:256:768",
              output_length: "uniform:32:96", block_size: 16}
lifecycle: {startup_s: 0.2, min_workers: 1, max_workers: 6}
planner: {type: saturation, interval_s: 0.5}
"""


def test_a_replay_scales_up_under_load_and_back(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(BURST)
    report = simulate(load_config(str(path))).report
    el = report["elastic"]
    adds = [a for a in el["scaling"] if a["action"] == "add"]
    removes = [a for a in el["scaling"] if a["action"] == "remove"]
    assert adds and all(a["reason"].startswith("saturation: default:") for a in adds)
    assert removes and removes[-1]["t_ms"] > adds[0]["t_ms"]
    req = el["requests"]
    assert req["submitted"] == req["completed"] == 240
    assert el["planner"]["up"] == len(adds)
