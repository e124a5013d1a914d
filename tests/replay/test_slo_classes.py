"""SLO classes (servesim.workload.classes), admission policies (servesim.replay.admission)
and the report's per-class section (servesim.report.classes)."""

from __future__ import annotations

import json

import pytest
from servesim._markers import hookimpl
from servesim.config.loader import load_config
from servesim.config.workload_scope import SloClassConfig
from servesim.errors import ConfigError, TraceError
from servesim.plugins import Plugins, make_plugin_manager
from servesim.replay.runner import simulate
from servesim.report.stats import distribution
from servesim.report.summary import per_request_lines
from servesim.workload.classes import assign_classes
from servesim.workload.mooncake import MooncakeTrace
from servesim.workload.synthetic import generate

CLASSES = """
  classes:
    - {name: interactive, share: 0.3, priority: 0, sla_ttft_ms: 100, sla_tpot_ms: 30}
    - {name: batch, share: 0.7, priority: 1, sla_e2e_ms: 10000}
"""


def run(tmp_path, extra="", sets=(), plugins=None):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload:\n  synthetic: {num_requests: 60, rate: 20}\n" + extra)
    res = simulate(load_config(str(cfg), list(sets), plugins or Plugins()))
    return res, [json.loads(x) for x in per_request_lines(res.log, res.session_ids)]


def test_classes_are_drawn_per_session_by_share_from_the_seed():
    from servesim.config.sections import SyntheticConfig

    classes = (SloClassConfig(name="a", share=1, priority=3), SloClassConfig(name="b", share=3))
    cfg = SyntheticConfig(num_requests=400, turns_per_session=2)
    w = generate(cfg, 0)
    got = assign_classes(w, classes, 0)
    for s in w.sessions:
        assert len({got[t.request_id] for t in s.turns}) == 1
        assert all(t.priority == (3 if got[t.request_id] == 0 else 0) for t in s.turns)
    share_a = got.count(0) / len(got)
    assert 0.15 < share_a < 0.35  # 1 in 4 by share
    assert assign_classes(generate(cfg, 0), classes, 0) == got
    assert assign_classes(generate(cfg, 0), classes, 1) != got


def test_a_trace_names_the_class_and_an_unknown_one_names_file_line_and_field(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"timestamp": 0, "output_length": 2, "hash_ids": [1], "class": "b"},
        {"timestamp": 1, "output_length": 2, "hash_ids": [2], "class": "a"},
        {"timestamp": 2, "output_length": 2, "hash_ids": [3], "class": "zzz"},
    ]) + "\n")
    classes = (SloClassConfig(name="a", share=0), SloClassConfig(name="b", share=1))
    w = MooncakeTrace.read(str(path), trace_block_size=4)
    with pytest.raises(TraceError) as info:
        assign_classes(w, classes, 0)
    assert info.value.line == 3 and "'class'" in str(info.value) and str(path) in str(info.value)
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")
    assert assign_classes(MooncakeTrace.read(str(path), trace_block_size=4), classes, 0) == [1, 0]
    path.write_text(json.dumps({"output_length": 2, "hash_ids": [1], "class": 5}) + "\n")
    with pytest.raises(TraceError) as info:
        MooncakeTrace.read(str(path), trace_block_size=4)
    assert info.value.line == 1 and "'class'" in str(info.value)


def test_per_class_section_counts_and_latencies(tmp_path):
    res, lines = run(tmp_path, CLASSES)
    rep = res.report
    sec = rep["classes"]
    assert set(sec) == {"interactive", "batch"}
    assert rep["rejected"] == 0 and rep["rejected_by"] == {}
    for name, c in sec.items():
        mine = [r for r in lines if r["class"] == name]
        assert c["submitted"] == len(mine)
        assert c["completed"] + c["failed"] + c["rejected"] + c["cut_off"] == c["submitted"]
        ttft = [r["ttft_ms"] for r in mine]
        want = distribution("ttft", ttft, rep["percentiles"])
        assert c["mean_ttft_ms"] == round(want["mean_ttft_ms"], 6)
        assert c["p99_ttft_ms"] == round(want["p99_ttft_ms"], 6)
    inter = [r for r in lines if r["class"] == "interactive"]
    good = sum(1 for r in inter if r["ttft_ms"] <= 100 and (
        r["num_output_tokens"] < 2 or (r["e2el_ms"] - r["ttft_ms"]) / (r["num_output_tokens"] - 1) <= 30))
    assert sec["interactive"]["goodput_completed"] == good
    assert sec["interactive"]["sla"] == {"ttft_ms": 100, "tpot_ms": 30}
    assert sec["interactive"]["sla_attainment"] == round(good / len(inter), 6)
    assert sum(c["submitted"] for c in sec.values()) == rep["num_requests"] == 60
    # the 'always' policy and no policy replay alike
    again, lines2 = run(tmp_path, CLASSES + "  admission: {type: always}\n")
    assert [r["completion_ms"] for r in lines2] == [r["completion_ms"] for r in lines]


def test_queue_shed_refuses_only_the_lowest_class_past_the_depth(tmp_path):
    res, lines = run(tmp_path, CLASSES + "  admission: {type: queue_shed, max_in_flight: 6}\n")
    rep = res.report
    refused = [r for r in lines if r["refused_by"] is not None]
    assert refused and all(r["class"] == "batch" and r["refused_by"] == "queue_full" for r in refused)
    assert all(r["rejected"] and r["completion_ms"] == r["arrival_ms"] for r in refused)
    admitted = [r for r in lines if r["refused_by"] is None]
    for r in refused:
        t = r["arrival_ms"]
        busy = [a for a in admitted if a["arrival_ms"] <= t < a["completion_ms"]]
        assert len(busy) >= 6
    assert rep["rejected"] == len(refused) and rep["rejected_by"] == {"queue_full": len(refused)}
    assert rep["completed"] + rep["failed"] + rep["rejected"] == rep["num_requests"]
    assert rep["classes"]["batch"]["rejected_by"] == {"queue_full": len(refused)}
    assert rep["classes"]["interactive"]["rejected"] == 0


def test_token_bucket_admits_the_burst_then_the_refill(tmp_path):
    res, lines = run(tmp_path, CLASSES + "  admission: {type: token_bucket, rate: 0.001, "
                                         "burst: {interactive: 3, batch: 2}}\n")
    for name, burst in (("interactive", 3), ("batch", 2)):
        mine = sorted((r for r in lines if r["class"] == name),
                      key=lambda r: (r["arrival_ms"], r["request_id"]))
        assert [r["refused_by"] for r in mine] == [None] * burst + ["rate_limited"] * (len(mine) - burst)
    res, lines = run(tmp_path, "  admission: {type: token_bucket, rate: 5, burst: 1, per: session}\n")
    assert res.report["rejected"] == 0  # one request per session: every bucket is full
    assert "classes" not in res.report


@pytest.mark.parametrize(("admission", "path"), [
    ("{type: nope}", "workload.admission.type"),
    ("{type: queue_shed}", "workload.admission.max_in_flight"),
    ("{type: queue_shed, max_in_flight: 2, shed: [x]}", "workload.admission.shed"),
    ("{type: token_bucket, rate: 1, colour: red}", "workload.admission.colour"),
    ("{type: token_bucket, rate: {batch: 1}}", "workload.admission.rate"),
])
def test_bad_admission_options_name_their_key(tmp_path, admission, path):
    with pytest.raises(ConfigError) as info:
        run(tmp_path, CLASSES + f"  admission: {admission}\n")
    assert info.value.path == path


def test_bad_classes_name_their_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload:\n  classes: [{name: a, share: 0}, {name: a, share: -1, sla_ttft_ms: 0}]\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), [], Plugins())
    text = str(info.value)
    for key in ("workload.classes[1].name", "workload.classes[1].share", "workload.classes[1].sla_ttft_ms"):
        assert key in text


class OddOut:
    def __init__(self, options, classes):
        self.options = options

    def admit(self, candidate):
        return "odd" if candidate.request_id % 2 else None


class _Plugin:
    @hookimpl
    def servesim_register_admission_policies(self, registry):
        registry.add("odd_out", OddOut)


def test_an_admission_policy_from_a_plugin(tmp_path):
    pm = make_plugin_manager()
    pm.register(_Plugin(), name="oddout")
    res, lines = run(tmp_path, "  admission: {type: odd_out}\n", plugins=Plugins(pm))
    assert {r["request_id"] for r in lines if r["refused_by"] == "odd"} == set(range(1, 60, 2))
    assert res.report["rejected_by"] == {"odd": 30}


def test_validate_refuses_a_bad_policy_before_the_run(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("workload:\n  admission: {type: token_bucket}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(cfg), [], Plugins())
    assert info.value.path == "workload.admission.rate"


def test_a_refused_turn_releases_its_sessions_next_turn_after_its_delay(tmp_path):
    res, lines = run(tmp_path, "  admission: {type: token_bucket, rate: 0.001, burst: 1}\n",
                     ["workload.synthetic.turns_per_session=3", "workload.synthetic.inter_turn_delay_ms=40",
                      "workload.synthetic.num_requests=9"])
    by_session: dict[str, list] = {}
    for r in sorted(lines, key=lambda r: r["request_id"]):
        by_session.setdefault(r["session_id"], []).append(r)
    assert len(by_session) == 3
    for turns in by_session.values():
        for a, b in zip(turns, turns[1:], strict=False):
            assert b["arrival_ms"] == pytest.approx(a["completion_ms"] + 40.0, abs=1e-6)
    in_order = sorted(lines, key=lambda r: (r["arrival_ms"], r["request_id"]))
    assert [r["refused_by"] is None for r in in_order] == [True] + [False] * 8
    assert res.report["completed"] == 1 and res.report["rejected"] == 8 and res.report["failed"] == 0


def test_scope_in_a_prefill_decode_split(tmp_path):
    res, lines = run(tmp_path, CLASSES + "  admission: {type: queue_shed, max_in_flight: 6}\n"
                     "  warmup: {requests: 5}\n  stop: {max_virtual_time_s: 2.5}\n"
                     "cluster: {prefill_workers: 1, decode_workers: 1, router: kv}\n")
    rep = res.report
    assert rep["num_handoffs"] > 0 and rep["warmup"]["requests"] == 5
    assert rep["completed"] + rep["failed"] + rep["rejected"] + rep["stop"]["cut_off"] == rep["num_requests"]
    assert len(lines) == rep["num_requests"] and all("prefill_worker" in r for r in lines)
    for c in rep["classes"].values():
        assert c["completed"] + c["failed"] + c["rejected"] + c["cut_off"] == c["submitted"]
