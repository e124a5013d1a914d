"""Worker lifecycle in aggregated replay: start-up, warm-up, drains, GPU-seconds, KV clears."""

from __future__ import annotations

import json

import pytest
from elastic_cases import accounting, load, planned_outputs, run
from servesim.errors import ConfigError
from servesim.replay.runner import simulate

LOG_FIELDS = ("arrival", "first", "last", "ntok", "done", "worker", "dp_rank", "admitted", "rejected")


@pytest.mark.parametrize("router", ["kv", "round_robin"])
def test_a_static_planner_changes_no_request(tmp_path, router):
    plain = run(tmp_path, router=router, name="a.yaml")
    static = run(tmp_path, "planner: {type: static, interval_s: 0.5}\nlifecycle: {startup_s: 3}\n",
                 router=router, name="b.yaml")
    for f in LOG_FIELDS:
        assert getattr(static.log, f) == getattr(plain.log, f), f
    a, b = dict(plain.report), dict(static.report)
    elastic = b.pop("elastic")
    a.pop("config"), b.pop("config")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert elastic["scaling"] == []
    assert accounting(static.report) == (120, 120, 0, 0)


SCHEDULE = """
planner:
  type: schedule
  steps: [{at_s: 0.5, workers: 4}, {at_s: 2.0, workers: 1}]
lifecycle:
  startup_s: 0.25
  warmup: {duration_s: 0.5, factor: 2.0}
  drain: %s
"""


def test_scaling_actions_states_and_gpu_seconds(tmp_path):
    result = run(tmp_path, SCHEDULE % "wait", n=160, rate=50.0)
    el = result.report["elastic"]
    assert [(a["t_ms"], a["action"], a["worker"], a["reason"]) for a in el["scaling"]] == [
        (500.0, "add", 2, "schedule"), (500.0, "add", 3, "schedule"),
        # starting/warming ones first, then the least loaded ready ones, newest first
        (2000.0, "remove", 3, "schedule"), (2000.0, "remove", 2, "schedule"),
        (2000.0, "remove", 1, "schedule"),
    ]
    workers = {w["worker"]: w for w in el["workers"]}
    assert workers[2]["added_ms"] == 500.0 and workers[2]["ready_ms"] == 750.0
    assert workers[0]["state"] == "ready" and workers[0]["stopped_ms"] == -1.0
    log = result.log
    end = max(log.done)
    for w in (1, 2, 3):
        mine = [rid for rid in range(log.n) if log.worker[rid] == w]
        assert mine and all(log.arrival[rid] < 2000.0 for rid in mine)  # none routed after removal
        if w >= 2:
            assert all(log.admitted[rid] >= 750.0 for rid in mine)  # none before ready
        # a waiting drain stops at the pass that finished its last request
        stop = max(2000.0, max(log.done[rid] for rid in mine))
        assert workers[w]["stopped_ms"] == pytest.approx(stop, abs=1e-6)
    expected = sum(((w["stopped_ms"] if w["stopped_ms"] >= 0 else end) - w["added_ms"]) / 1000.0
                   for w in el["workers"])
    assert el["gpu_seconds"] == pytest.approx(expected, abs=1e-6)
    assert accounting(result.report) == (160, 160, 0, 0)


def test_warmup_passes_take_the_factor(tmp_path):
    result = run(tmp_path, SCHEDULE % "wait", n=160, rate=50.0, record_token_times=True)
    log = result.log
    warm, hot = set(), set()
    for rid in range(log.n):
        times = log.token_times[rid]
        for a, b in zip(times, times[1:], strict=False):
            if log.worker[rid] in (2, 3) and 750.0 <= a and b <= 1250.0:
                warm.add(round(b - a, 9))
            elif log.worker[rid] in (0, 1):
                hot.add(round(b - a, 9))
    # fixed timing: decode 2 ms, a pass with prefill 8 ms; doubled while warming up
    assert 4.0 in warm and warm <= {2 * g for g in hot}
    assert min(hot) == 2.0


def test_redirect_hands_waiting_requests_back(tmp_path):
    # max_num_seqs 4: queues form, so the removed worker holds waiting requests
    result = run(tmp_path, SCHEDULE % "redirect", n=300, rate=200.0, seqs=4)
    el = result.report["elastic"]
    assert el["requests"]["redirected"] > 0
    log = result.log
    removed_at = {a["worker"]: a["t_ms"] for a in el["scaling"] if a["action"] == "remove"}
    for w, t in removed_at.items():
        assert all(log.admitted[rid] < t + 1e-9 or log.worker[rid] != w for rid in range(log.n))
    assert accounting(result.report) == (300, 300, 0, 0)


@pytest.mark.parametrize("attempts", [0, 2])
def test_immediate_fails_or_retries_in_flight_requests(tmp_path, attempts):
    extra = (SCHEDULE % "immediate") + f"  retry: {{max_attempts: {attempts}, backoff_s: 0.01}}\n"
    result = run(tmp_path, extra, n=160, rate=80.0, seqs=4)
    sub, done, failed, rejected = accounting(result.report)
    assert sub == done + failed + rejected == 160
    req = result.report["elastic"]["requests"]
    log = result.log
    if attempts == 0:
        assert failed > 0 and req["retried"] == 0
        assert result.report["completed"] == done
    else:
        assert failed == 0 and req["retried"] > 0
        # a retried request started over: exactly its planned tokens, once
        assert log.ntok == planned_outputs(tmp_path, n=160, rate=80.0, seqs=4)


def test_a_stopped_worker_clears_its_cache(tmp_path):
    sink = tmp_path / "kv.jsonl"
    extra = (SCHEDULE % "wait") + f"sinks:\n  kv_events: [{{type: jsonl, path: {sink}}}]\n"
    result = run(tmp_path, extra, n=160, rate=50.0)
    lines = [json.loads(x) for x in sink.read_text().splitlines()]
    stopped = {w["worker"]: w["stopped_ms"] for w in result.report["elastic"]["workers"]
               if w["stopped_ms"] >= 0}
    for w, t in stopped.items():
        mine = [x for x in lines if x["worker"] == w]
        assert mine[-1]["type"] == "AllBlocksCleared" and mine[-1]["at_ms"] == pytest.approx(t, abs=1e-6)
        assert mine[-1]["event_id"] == mine[-2]["event_id"] + 1
        assert [x["type"] for x in mine].count("AllBlocksCleared") == 1
    assert not any(x["type"] == "AllBlocksCleared" for x in lines if x["worker"] == 0)


def test_elastic_sections_are_left_out_of_a_plain_config(tmp_path):
    from servesim.config.elastic import ELASTIC_SECTIONS
    from servesim.config.sim import ELASTIC

    assert tuple(ELASTIC_SECTIONS) == ELASTIC  # the names the loader knows without the classes
    assert not {"lifecycle", "planner", "faults"} & set(load(tmp_path).resolved())
    loaded = load(tmp_path, SCHEDULE % "wait", name="b.yaml")
    resolved = loaded.resolved()
    assert resolved["lifecycle"]["drain"] == "wait" and resolved["planner"]["type"] == "schedule"


@pytest.mark.parametrize(("extra", "path"), [
    ("planner: {type: nope}\n", "planner.type"),
    ("planner: {type: static, interval_s: 0}\n", "planner.interval_s"),
    ("planner: {type: schedule, steps: [{at_s: 1}]}\n", "planner.steps[0].workers"),
    ("lifecycle: {startup_s: -1}\n", "lifecycle.startup_s"),
    ("lifecycle: {drain: later}\n", "lifecycle.drain"),
    ("lifecycle: {min_workers: 3, max_workers: 2}\n", "lifecycle.max_workers"),
    ("faults: {kv_view: [{drop: 2}]}\n", "faults.kv_view[0].drop"),
    ("faults: {slow: [{worker: 0, from_s: 0, until_s: 1, factor: 0.5}]}\n", "faults.slow[0].factor"),
    ("lifecycle: {warmup: {factor: 0.9}}\n", "lifecycle.warmup.factor"),
])
def test_config_errors_name_the_key(tmp_path, extra, path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, extra)
    assert path in str(info.value)


def test_a_schedule_naming_no_pool_needs_one_pool(tmp_path):
    extra = ("cluster:\n  pools: [{name: a, workers: 1}, {name: b, workers: 1}]\n"
             "planner: {type: schedule, steps: [{at_s: 1, workers: 2}]}\n")
    with pytest.raises(ConfigError) as info:
        simulate(load(tmp_path, extra))
    assert "steps[0].pool is required" in str(info.value)
