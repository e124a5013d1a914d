"""dynamo: the tick payload servesim builds for Dynamo's planner adapter, a recorded run of
Dynamo's planner replayed without Dynamo, the refusal when Dynamo is missing, the check kit.

tests/golden/dynamo_planner holds a run recorded by
benchmarks/conformance/dynamo_planner_compare.py --record (ai-dynamo 1.6.1): the trace,
servesim's payload and Dynamo's decision at each tick, servesim's scaling timeline and
latency means, and the reference replay's scaling events.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from servesim.config.loader import load_config
from servesim.contract import ForwardPassMetrics
from servesim.errors import ConfigError
from servesim.replay.planning import Percentiles, PoolSnapshot, TrafficWindow, WorkerSnapshot
from servesim.replay.runner import simulate
from servesim.testing import check_planner
from servesim_dynamo_planner import (
    DynamoPlanner,
    DynamoPlannerConfig,
    FpmBuffer,
    RecordedAdapter,
    TickPayload,
)
from servesim_dynamo_planner.planner import Capabilities

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden" / "dynamo_planner"


def golden() -> dict[str, Any]:
    return json.loads((GOLDEN / "decisions.json").read_text())


def config_file(tmp_path: Path, planner: dict[str, Any]) -> str:
    g = golden()
    cfg = {
        "engine": {"backend": "vllm", **g["engine"]},
        "cluster": {"workers": 1, "router": "round_robin"},
        "workload": {"trace": {"path": str(GOLDEN / "trace.jsonl"), "trace_block_size": 64}},
        "lifecycle": {"startup_s": g["startup_s"], "drain": "wait"},
        "planner": {"type": "dynamo", "interval_s": 5, "planner_config": g["planner_config"],
                    "capabilities": g["capabilities"], **planner},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return str(path)


def fpm(worker: int, dp: int = 0, queued: int = 0, ms: float = 10.0) -> ForwardPassMetrics:
    return ForwardPassMetrics(worker_id=worker, dp_rank=dp, num_decode_requests=1,
                              sum_queued_prefill_tokens=queued, duration_ms=ms)


def pool(workers: list[tuple[int, str, float]], passes: list[tuple[ForwardPassMetrics, float]],
         starting: tuple[int, ...] = ()) -> PoolSnapshot:
    ws = tuple(WorkerSnapshot(w, state, 0.0, 0, 0.0, 0, ready) for w, state, ready in workers)
    return PoolSnapshot("default", len(starting), 0, 0, 0, 0, 0, 0, 0, 0.0, Percentiles(),
                        Percentiles(), 0, 0.0, 0.0, passes=tuple(p for p, _ in passes),
                        workers=ws, pass_end_ms=tuple(t for _, t in passes),
                        starting_ids=starting)


# -- the payload -------------------------------------------------------------------------


def test_the_buffer_keeps_the_latest_pass_per_rank():
    buf = FpmBuffer(dp_size=2)
    buf.observe(pool([(4, "ready", 0.0), (5, "ready", 0.0)],
                     [(fpm(4, 0, 1), 100.0), (fpm(4, 0, 2), 200.0), (fpm(4, 1, 3), 300.0),
                      (fpm(5, 0, 4), 400.0)]), 500.0)
    buf.emit_idle_due([4, 5], 500.0)
    got = [(f["worker_id"], f["dp_rank"], f["sum_queued_prefill_tokens"]) for f in buf.take()]
    # Worker 5's rank 1 published nothing since its start at 0: 500 ms is under the second.
    assert got == [(4, 0, 2), (4, 1, 3), (5, 0, 4)]
    assert buf.take() == []


def test_a_rank_silent_for_a_second_gets_an_all_zero_pass():
    buf = FpmBuffer()
    buf.observe(pool([(8, "ready", 0.0)], []), 1500.0)
    buf.emit_idle_due([8], 1500.0)
    (idle,) = buf.take()
    assert idle["wall_time"] == 0.0 and idle["num_decode_requests"] == 0
    assert buf.last_publish_ms[(8, 0)] == 1000.0  # the publish clock moves in whole seconds
    buf.emit_idle_due([8], 2400.0)  # 1.4 s after 1.0 s: idle again
    assert len(buf.take()) == 1
    buf.observe(pool([(8, "ready", 0.0)], [(fpm(8, ms=100.0), 3000.0)]), 3500.0)
    buf.emit_idle_due([], 3500.0)  # no longer active: its rank is dropped
    assert buf.take() == []
    buf.emit_idle_due([8], 4000.0)  # active again, its clock starts over: nothing due
    assert buf.take() == []


def test_a_pass_older_than_a_second_is_replaced_by_an_idle_one():
    buf = FpmBuffer()
    buf.observe(pool([(0, "ready", 0.0)], [(fpm(0, queued=7), 3900.0)]), 5000.0)
    buf.emit_idle_due([0], 5000.0)
    assert buf.take()[0]["sum_queued_prefill_tokens"] == 0
    buf.observe(pool([(0, "ready", 0.0)], [(fpm(0, queued=7), 9100.0)]), 10000.0)
    buf.emit_idle_due([0], 10000.0)
    (last,) = buf.take()
    assert last["sum_queued_prefill_tokens"] == 7 and last["wall_time"] == 0.01


def test_the_payload_counts_workers_by_state_and_sums_traffic_across_ticks():
    pay = TickPayload(disagg=False)
    p = pool([(0, "ready", 0.0), (1, "warmup", 4000.0), (3, "draining", 0.0)],
             [(fpm(0), 4990.0), (fpm(3), 4995.0)], starting=(2,))
    pay.observe(None, p, TrafficWindow(2, 100.0, 10.0), 0.0)
    pay.observe(None, p, TrafficWindow(6, 300.0, 30.0), 5000.0)
    out = pay.build(None, p, 5000.0)
    assert out["tick_ordinal"] == 0 and out["now_ms"] == 5000.0
    assert out["active_decode_ids"] == [0, 1] and out["starting_decode_ids"] == [2]
    assert out["draining_decode_ids"] == [3]
    assert (out["non_draining_decode_count"], out["total_decode_count"]) == (3, 4)
    assert out["prefill_fpm_snapshots"] == [] and out["active_prefill_count"] == 0
    # Worker 3 is draining: its pass is dropped; worker 1 started at 4 s, idle for 1 s.
    assert [(f["worker_id"], f["num_decode_requests"]) for f in out["decode_fpm_snapshots"]] == [
        (0, 1), (1, 0)]
    t = out["traffic"]
    assert (t["duration_s"], t["num_req"], t["avg_isl"], t["avg_osl"]) == (5.0, 8, 250.0, 25.0)
    assert pay.build(None, p, 10000.0)["traffic"]["num_req"] == 0


# -- a recorded run of Dynamo's planner ------------------------------------------------


def test_recorded_decisions_reproduce_the_recorded_run(tmp_path):
    g = golden()
    cfg = config_file(tmp_path, {"recorded": str(GOLDEN / "decisions.json")})
    rep = simulate(load_config(cfg)).report
    el = rep["elastic"]
    # servesim built, tick by tick, the payload Dynamo's planner was given when recorded.
    assert el["planner"]["input_mismatches"] == []
    assert el["planner"]["ticks"] == len(g["ticks"]) == 24
    assert el["scaling"] == g["servesim"]["scaling"]
    assert {k: rep[k] for k in g["servesim"]["means"]} == g["servesim"]["means"]
    assert el["gpu_seconds"] == g["servesim"]["gpu_seconds"]
    # The reference's own planner replay scaled at the same times to the same counts.
    events = [(e["at_s"], e["from_count"], e["to_count"]) for e in el["planner"]["scaling_events"]]
    assert events == [(e["at_s"], e["from_count"], e["to_count"])
                      for e in g["reference"]["scaling_events"]]
    assert events == [(50.0, 1, 2), (60.0, 2, 3), (70.0, 3, 4), (80.0, 4, 5), (90.0, 5, 4),
                      (95.0, 4, 3), (100.0, 3, 2), (105.0, 2, 1)]


def test_a_diverging_run_names_the_first_differing_input(tmp_path):
    record = golden()
    record["ticks"][9]["input"]["decode_fpm_snapshots"][0]["sum_queued_prefill_tokens"] += 1
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    rep = simulate(load_config(config_file(tmp_path, {"recorded": str(path)}))).report
    assert rep["elastic"]["planner"]["input_mismatches"] == [
        [9, "decode_fpm_snapshots[0].sum_queued_prefill_tokens"]]


def test_record_to_writes_what_recorded_reads(tmp_path):
    out = tmp_path / "ticks.json"
    cfg = config_file(tmp_path, {"recorded": str(GOLDEN / "decisions.json"),
                                 "record_to": str(out)})
    simulate(load_config(cfg))
    again = RecordedAdapter.load(out)
    assert again.initial_ms == 5000.0
    assert again.ticks == golden()["ticks"]


# -- without Dynamo ----------------------------------------------------------------------


def test_without_dynamo_the_planner_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dynamo.planner", None)
    with pytest.raises(ConfigError) as err:
        simulate(load_config(config_file(tmp_path, {})))
    msg = str(err.value)
    assert "planner: planner 'dynamo'" in msg
    assert "servesim_dynamo_planner" in msg and "servesim-dynamo-planner" in msg
    assert "ai-dynamo==1.6.1" in msg


def test_the_plugin_imports_without_dynamo():
    code = ("import sys; sys.modules['dynamo'] = None\n"
            "from servesim.plugins import Plugins\n"
            "print(Plugins().planners().get('dynamo').__name__)\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] == 'dynamo'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # Registered, and nothing tried to import a dynamo module but the blocked entry itself.
    assert out.stdout.split("\n")[:2] == ["DynamoPlanner", "['dynamo']"]


def test_bad_options_are_config_errors(tmp_path):
    cfg = config_file(tmp_path, {"recorded": str(GOLDEN / "decisions.json"), "pool": "nope"})
    with pytest.raises(ConfigError, match="pool 'nope' is not a pool"):
        simulate(load_config(cfg))
    cfg = config_file(tmp_path, {"recorded": str(tmp_path / "missing.json")})
    with pytest.raises(ConfigError, match="recorded: cannot read"):
        simulate(load_config(cfg))


# -- the check kit -------------------------------------------------------------------------


def test_the_planner_kit_passes_on_recorded_decisions():
    cfg = DynamoPlannerConfig(recorded=str(GOLDEN / "decisions.json"))
    assert check_planner(DynamoPlanner, cfg).ok


def test_the_planner_kit_passes_on_dynamos_planner():
    pytest.importorskip("dynamo.planner.offline.replay_adapter")
    g = golden()
    cfg = DynamoPlannerConfig(planner_config=g["planner_config"],
                              capabilities=Capabilities(**g["capabilities"]))
    assert check_planner(DynamoPlanner, cfg).ok


def same_fpms(ours: list[dict[str, Any]], ref: list[dict[str, Any]]) -> bool:
    """Counts equal, and times and variances to 1e-9 (servesim's Welford variances and the
    reference's differ in the last bits)."""
    if len(ours) != len(ref):
        return False
    for a, b in zip(ours, ref, strict=True):
        for key, value in b.items():
            if isinstance(value, float):
                if not math.isclose(a[key], value, rel_tol=1e-9, abs_tol=1e-12):
                    return False
            elif a[key] != value:
                return False
    return True


def test_the_recorded_run_matches_the_reference_tick_by_tick():
    """The record's two sides: every tick decided alike, and servesim's payloads equal the
    reference's (FPMs, worker ids) through 100 s, until servesim's choice of the worker a
    scale-down removes (the least loaded, Dynamo's the newest) parts them."""
    g = golden()
    ours, ref = g["ticks"], g["reference"]["ticks"]
    assert [t["decision"] for t in ours] == [t["decision"] for t in ref]
    keys = ("now_ms", "active_decode_ids", "starting_decode_ids", "non_draining_decode_count")
    same = [all(a["input"][k] == b["input"][k] for k in keys)
            and same_fpms(a["input"]["decode_fpm_snapshots"], b["input"]["decode_fpm_snapshots"])
            for a, b in zip(ours, ref, strict=True)]
    assert same[:21] == [True] * 21 and not same[21]


def test_the_docs_example_configures_the_planner(tmp_path):
    doc = (GOLDEN.parents[2] / "docs" / "elastic.md").read_text()
    blocks = [b.split("```")[0] for b in doc.split("```yaml\n")[1:]]
    block = next(b for b in blocks if "type: dynamo" in b)
    path = tmp_path / "sim.yaml"
    path.write_text("engine: {backend: vllm}\nworkload: {synthetic: {num_requests: 4, rate: 1.0}}\n"
                    + block)
    spec = load_config(str(path)).planner_spec
    assert spec.name == "dynamo" and spec.interval_s == 5
    assert spec.config.planner_config["load_adjustment_interval_seconds"] == 5
    assert spec.config.capabilities == Capabilities(num_gpu=1, max_num_batched_tokens=4096,
                                                    max_num_seqs=64, max_kv_tokens=65536)


def test_a_disagg_payload_reports_each_role_from_its_pool():
    pay = TickPayload(disagg=True)
    pre = pool([(0, "ready", 0.0)], [(fpm(0, queued=300), 4900.0)], starting=(3,))
    dec = pool([(1, "ready", 0.0), (2, "draining", 0.0)], [(fpm(1), 4950.0)])
    pay.observe(pre, dec, TrafficWindow(), 5000.0)
    out = pay.build(pre, dec, 5000.0)
    assert (out["active_prefill_ids"], out["starting_prefill_ids"]) == ([0], [3])
    assert (out["active_decode_ids"], out["draining_decode_ids"]) == ([1], [2])
    assert (out["non_draining_prefill_count"], out["total_decode_count"]) == (2, 2)
    assert [f["sum_queued_prefill_tokens"] for f in out["prefill_fpm_snapshots"]] == [300]
    assert [f["worker_id"] for f in out["decode_fpm_snapshots"]] == [1]
