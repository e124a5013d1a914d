"""``workload.warmup`` and ``workload.stop`` (servesim.replay.scope): the replay itself is the
one without them (same sink bytes, same per-request times); only what is reported changes."""

from __future__ import annotations

import json

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import dumps, per_request_lines

BASE = """
workload:
  synthetic: {num_requests: 40, rate: 20, turns_per_session: 2, inter_turn_delay_ms: 50}
sinks:
  kv_events: [{type: jsonl, path: KV}]
"""


def run(tmp_path, name, sets=()):
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(BASE.replace("KV", str(tmp_path / f"{name}.kv.jsonl")))
    res = simulate(load_config(str(cfg), list(sets), Plugins()))
    lines = [json.loads(x) for x in per_request_lines(res.log, res.session_ids)]
    return res, {r["request_id"]: r for r in lines}, (tmp_path / f"{name}.kv.jsonl").read_bytes()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return run(tmp_path_factory.mktemp("base"), "base")


def test_warmup_requests_are_left_out_of_report_and_per_request_output(tmp_path, base):
    _, full, kv = base
    res, lines, warm_kv = run(tmp_path, "warm", ["workload.warmup.requests=10"])
    assert warm_kv == kv  # sinks still see the warmup requests
    warm = set(sorted(full, key=lambda r: (full[r]["arrival_ms"], r))[:10])
    assert set(lines) == set(full) - warm
    for rid, rec in lines.items():  # the replay is the same one
        assert {k: rec[k] for k in ("arrival_ms", "ttft_ms", "completion_ms")} == \
               {k: full[rid][k] for k in ("arrival_ms", "ttft_ms", "completion_ms")}
    rep = res.report
    start = min(r["arrival_ms"] for r in lines.values())
    assert rep["num_requests"] == rep["completed"] == 30
    assert rep["warmup"] == {"requests": 10, "measured_from_ms": start}
    assert rep["duration_ms"] == round(max(r["completion_ms"] for r in lines.values()) - start, 6)
    ttft = sorted(r["ttft_ms"] for r in lines.values())
    assert rep["max_ttft_ms"] == ttft[-1]
    assert rep["total_output_tokens"] == sum(r["num_output_tokens"] for r in lines.values())


def test_warmup_duration_and_count_first_one_wins(tmp_path, base):
    _, full, _ = base
    order = sorted(full, key=lambda r: (full[r]["arrival_ms"], r))
    t0 = full[order[0]]["arrival_ms"]
    by_time = [r for r in order if full[r]["arrival_ms"] < t0 + 500.0]
    assert 0 < len(by_time) < 30
    rep = run(tmp_path, "d", ["workload.warmup.duration_s=0.5"])[0].report
    assert rep["warmup"]["requests"] == len(by_time)
    rep = run(tmp_path, "both", ["workload.warmup.duration_s=0.5",
                                 f"workload.warmup.requests={len(by_time) + 5}"])[0].report
    assert rep["warmup"]["requests"] == len(by_time)
    rep = run(tmp_path, "both2", ["workload.warmup.duration_s=0.5", "workload.warmup.requests=2"])[0].report
    assert rep["warmup"]["requests"] == 2


def test_stop_at_a_virtual_time_cuts_off_the_requests_in_flight(tmp_path, base):
    _, full, _ = base
    t = 1500.0
    res, lines, _ = run(tmp_path, "stop", ["workload.stop.max_virtual_time_s=1.5"])
    arrived = {r for r, rec in full.items() if rec["arrival_ms"] <= t}
    done = {r for r in arrived if full[r]["completion_ms"] <= t}
    assert set(lines) == arrived
    assert {r for r, rec in lines.items() if rec["completion_ms"] is not None} == done
    assert {r for r, rec in lines.items() if rec["cut_off"]} == arrived - done
    assert all(rec["e2el_ms"] is None for rec in lines.values() if rec["cut_off"])
    rep = res.report
    assert rep["stop"] == {"reason": "max_virtual_time", "at_ms": t, "cut_off": len(arrived - done),
                           "not_arrived": len(full) - len(arrived)}
    assert rep["num_requests"] == len(arrived) and rep["completed"] == len(done)
    assert rep["completed"] + rep["failed"] + rep["stop"]["cut_off"] == rep["num_requests"]
    # the reference's key is accepted too
    again = run(tmp_path, "ms", ["workload.stop.max_sim_time_ms=1500"])[0].report
    assert dumps({**again, "config": None}) == dumps({**rep, "config": None})


def test_stop_after_completions_ends_at_the_nth_completion(tmp_path, base):
    _, full, _ = base
    ends = sorted(rec["completion_ms"] for rec in full.values())
    res, lines, _ = run(tmp_path, "n", ["workload.stop.completions=7"])
    rep = res.report
    at = ends[6]
    assert rep["stop"]["reason"] == "completions" and rep["stop"]["at_ms"] == at
    assert rep["completed"] == sum(1 for e in ends if e <= at) >= 7
    assert all(r["completion_ms"] is None or r["completion_ms"] <= at for r in lines.values())


def test_stop_that_is_never_reached_reports_drained(tmp_path, base):
    base_res, full, _ = base
    res, lines, _ = run(tmp_path, "late", ["workload.stop.max_virtual_time_s=1000"])
    assert res.report["stop"]["reason"] == "drained" and res.report["stop"]["cut_off"] == 0
    assert res.report["completed"] == base_res.report["completed"]
    assert res.report["mean_itl_ms"] == base_res.report["mean_itl_ms"]


def test_without_the_settings_the_resolved_config_has_no_new_keys(base):
    assert not {"warmup", "stop", "classes", "admission"} & set(base[0].report["config"]["workload"])
    assert "warmup" not in base[0].report and "stop" not in base[0].report


@pytest.mark.parametrize(("sets", "path"), [
    (["workload.warmup={}"], "workload.warmup"),
    (["workload.warmup.requests=0"], "workload.warmup.requests"),
    (["workload.stop.completions=0"], "workload.stop.completions"),
    (["workload.stop.max_virtual_time_s=1", "workload.stop.max_sim_time_ms=5"],
     "workload.stop.max_sim_time_ms"),
    (["workload.stop.max_virtual_time_s=-1"], "workload.stop.max_virtual_time_s"),
])
def test_bad_values_name_their_key(tmp_path, sets, path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), sets, Plugins())
    assert info.value.path == path


def test_warmup_wait_holds_the_measured_sessions_until_the_warmup_ends(tmp_path, base):
    _, full, _ = base
    res, lines, _ = run(tmp_path, "wait", ["workload.warmup={requests: 5, wait: true}"])
    # the warmup is the first five sessions (both turns of each): 10 requests, unreported
    assert len(lines) == 30 and res.report["warmup"]["requests"] == 10
    order = sorted(full, key=lambda r: (full[r]["arrival_ms"], r))
    warm_sessions = {full[r]["session_id"] for r in order[:5]}
    assert {rec["session_id"] for rec in lines.values()}.isdisjoint(warm_sessions)
    first_measured = min(rec["arrival_ms"] for rec in lines.values())
    assert res.report["warmup"]["measured_from_ms"] == first_measured
    # the first measured session would have started while the warmup ran; it started later
    free_first = min(rec["arrival_ms"] for rec in full.values() if rec["session_id"] not in warm_sessions)
    assert first_measured > free_first
    # later sessions keep their spacing: the trace's clock only stopped
    starts = sorted(min(r["arrival_ms"] for r in lines.values() if r["session_id"] == s)
                    for s in {r["session_id"] for r in lines.values()})
    base_starts = sorted(min(r["arrival_ms"] for r in full.values() if r["session_id"] == s)
                         for s in {r["session_id"] for r in lines.values()})
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps == pytest.approx([b - a for a, b in zip(base_starts, base_starts[1:])], abs=1e-5)
    with pytest.raises(ConfigError, match="workload.warmup.wait"):
        run(tmp_path, "bad", ["workload.warmup={duration_s: 1, wait: true}"])
    with pytest.raises(ConfigError, match="workload.warmup.wait"):
        run(tmp_path, "bad2", ["workload.warmup={requests: 2, wait: maybe}"])
