"""Report math on hand-computed cases (dynamo-mocker.md §9.3 definitions)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.config.sections import ReportConfig
from servesim.report.stats import RequestLog, percentile, percentile_key
from servesim.report.summary import build_report, dumps, format_table, per_request_lines


def small_log(record_token_times: bool = False) -> RequestLog:
    log = RequestLog([100, 50, 30, 70], record_token_times=record_token_times)
    log.arrival[:] = [0.0, 5.0, 10.0, 1.0]
    log.tokens([0], 10.0)
    log.tokens([0], 12.0)
    log.tokens([1], 25.0)
    log.tokens([0], 16.0)
    log.tokens([2], 30.0)
    log.tokens([2], 31.0)
    log.done[:] = [16.0, 25.0, 40.0, 3.0]
    log.rejected[3] = True
    log.admission(0, 50)
    log.admission(2, 10)
    log.admission(2, 14)  # re-admission after a preemption: the latest admission counts
    log.num_preemptions = 1
    return log


def test_counts_throughput_and_duration():
    rep = build_report(small_log(), ReportConfig())
    assert rep["completed"] == 3 and rep["failed"] == 1 and rep["num_requests"] == 4
    assert rep["total_input_tokens"] == 180 and rep["total_output_tokens"] == 6
    assert rep["duration"] == 0.04 and rep["duration_ms"] == 40.0
    assert rep["request_throughput"] == pytest.approx(75.0)
    assert rep["output_throughput"] == pytest.approx(150.0)
    assert rep["total_token_throughput"] == pytest.approx(4650.0)
    assert rep["prefix_cache_hit_rate"] == round(64 / 180, 6)  # 50 + 14
    assert rep["first_admission_prefix_cache_hit_rate"] == round(60 / 180, 6)
    assert rep["num_preemptions"] == 1
    assert rep["max_output_tokens_per_s"] == 6  # every token falls in simulated second 0


def test_latency_distributions():
    rep = build_report(small_log(), ReportConfig())
    # ttft = [10, 20, 20]
    assert rep["mean_ttft_ms"] == round(50 / 3, 6)
    assert rep["median_ttft_ms"] == 20.0 and rep["p90_ttft_ms"] == 20.0
    assert rep["std_ttft_ms"] == round(math.sqrt(200 / 9), 6)
    # tpot per request with >= 2 tokens: r0 (16-10)/2 = 3, r2 (31-30)/1 = 1
    assert rep["mean_tpot_ms"] == 2.0 and rep["std_tpot_ms"] == 1.0
    assert rep["median_tpot_ms"] == 3.0  # rank round(0.5) = 1, half away from zero
    # itl pooled gaps: r0 [2, 4], r2 [1]
    assert rep["mean_itl_ms"] == round(7 / 3, 6)
    assert rep["median_itl_ms"] == 2.0 and rep["p99_itl_ms"] == 4.0 and rep["max_itl_ms"] == 4.0
    assert rep["std_itl_ms"] == round(math.sqrt(14 / 9), 6)
    # ttst = second token - first token: r0 2, r2 1; per-user rate = 1000 / each gap
    assert rep["mean_ttst_ms"] == 1.5 and rep["max_ttst_ms"] == 2.0
    assert rep["mean_output_token_throughput_per_user"] == round((500 + 250 + 1000) / 3, 6)
    assert rep["p99_output_token_throughput_per_user"] == 1000.0
    # e2el = last token - arrival: [16, 20, 21]
    assert rep["mean_e2el_ms"] == 19.0 and rep["p50_e2el_ms"] == 20.0
    assert rep["request_goodput"] is None and rep["goodput_completed"] is None


@pytest.mark.parametrize(
    ("sla", "good"),
    [
        ({"sla_ttft_ms": 15.0}, 1),
        ({"sla_tpot_ms": 2.0}, 2),  # r0 fails (3 ms); r1 has one token so tpot is skipped
        ({"sla_e2e_ms": 20.0}, 2),  # r2 fails (21 ms)
        ({"sla_ttft_ms": 25.0, "sla_tpot_ms": 2.0, "sla_e2e_ms": 20.0}, 1),
    ],
)
def test_goodput(sla, good):
    rep = build_report(small_log(), ReportConfig(**sla))
    assert rep["goodput_completed"] == good
    assert rep["request_goodput"] == pytest.approx(good / 0.04)


def test_nearest_rank_percentiles():
    vals = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert percentile(vals, 50) == 4.0  # (6-1)*0.5 = 2.5 rounds up, not to even
    assert percentile(vals, 0) == 1.0 and percentile(vals, 100) == 6.0
    assert percentile(list(range(101)), 99) == 99
    assert percentile([], 99) == 0.0
    assert percentile_key(99) == "p99" and percentile_key(99.9) == "p99.9"
    rep = build_report(small_log(), ReportConfig(percentiles=(99.9, 25.0)))
    assert rep["p99.9_ttft_ms"] == 20.0 and rep["p25_ttft_ms"] == 20.0  # rank round(0.5)=1
    assert "p99_ttft_ms" not in rep


def test_zero_output_request_counts_without_samples():
    log = RequestLog([10])
    log.arrival[0] = 0.0
    log.done[0] = 5.0
    rep = build_report(log, ReportConfig())
    assert rep["completed"] == 1 and rep["total_output_tokens"] == 0
    assert rep["mean_ttft_ms"] == 0.0 and rep["duration_ms"] == 5.0


def test_json_is_sorted_and_stable():
    rep = build_report(small_log(), ReportConfig(), {"engine": {"backend": "toy"}})
    text = dumps(rep)
    assert text == dumps(json.loads(text))
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert json.loads(text)["config"] == {"engine": {"backend": "toy"}}


def test_per_request_lines_sorted_by_arrival_with_token_times():
    log = small_log(record_token_times=True)
    log.worker[:] = [0, 1, 0, 1]
    lines = [json.loads(x) for x in per_request_lines(log, ["a", "b", "c", "d"])]
    assert [x["request_id"] for x in lines] == [0, 3, 1, 2]
    assert lines[0]["token_times_ms"] == [10.0, 12.0, 16.0]
    assert lines[0]["ttft_ms"] == 10.0 and lines[0]["session_id"] == "a"
    assert lines[1]["rejected"] is True and lines[1]["first_token_ms"] is None


def test_table_has_every_section():
    table = format_table(build_report(small_log(), ReportConfig(sla_ttft_ms=15.0)), wall_s=1.5)
    for label in ("Successful requests:", "Mean TTFT (ms):", "P99 ITL (ms):", "Median E2EL (ms):",
                  "Good requests (SLA):", "Wall time (s):"):
        assert label in table
    widths = {len(line) for line in table.splitlines()}
    assert widths == {60}

# Gaps on the simulator's nanosecond grid (every pass end is rounded to it), or zero: a
# sub-nanosecond gap such as 1e-169 ms cannot occur, and its per-user rate (1000 / gap)
# would overflow the weighted second moment.
gaps = st.one_of(st.just(0.0), st.integers(1, 50_000_000).map(lambda ns: ns / 1e6))
request_times = st.tuples(
    st.floats(0, 100, allow_nan=False),  # arrival
    st.lists(gaps, min_size=0, max_size=6),  # gaps after arrival
    st.booleans(),  # rejected
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(request_times, min_size=1, max_size=12), st.floats(0, 100, allow_nan=False))
def test_report_agrees_with_brute_force(requests, p):
    log = RequestLog([10] * len(requests))
    for rid, (arrival, gaps, rejected) in enumerate(requests):
        log.arrival[rid] = arrival
        t = arrival
        for g in gaps:
            t += g
            log.tokens([rid], t)
        log.done[rid] = t
        log.rejected[rid] = rejected
    rep = build_report(log, ReportConfig(percentiles=(p,)))
    ok = [r for r in requests if not r[2]]
    assert rep["completed"] == len(ok) and rep["failed"] == len(requests) - len(ok)
    ttft = sorted(sum(g[:1]) for _, g, _ in ok if g)
    itl = sorted(x for _, g, _ in ok for x in g[1:])
    key = f"p{int(p)}" if float(p).is_integer() else f"p{p:g}"
    if ttft:
        assert rep[f"{key}_ttft_ms"] == round(ttft[math.floor((len(ttft) - 1) * p / 100 + 0.5)], 6)
        assert rep["mean_ttft_ms"] == pytest.approx(sum(ttft) / len(ttft), abs=2e-6)
    if itl:
        assert rep["mean_itl_ms"] == pytest.approx(sum(itl) / len(itl), abs=2e-6)
        assert rep["max_itl_ms"] == round(max(itl), 6)
    ttst = sorted(g[1] for _, g, _ in ok if len(g) >= 2)
    if ttst:
        assert rep["mean_ttst_ms"] == pytest.approx(sum(ttst) / len(ttst), abs=2e-6)
    # every gap pooled in ITL sums, per request, to last - first (what TPOT averages)
    assert len(itl) == sum(max(len(g) - 1, 0) for _, g, _ in ok)
    assert rep["total_output_tokens"] == sum(len(g) for _, g, _ in ok)


def test_max_output_tokens_per_whole_simulated_second():
    log = RequestLog([5, 5])
    log.arrival[:] = [0.0, 0.0]
    for t in (999.0, 1000.0, 1500.0, 2500.0):
        log.tokens([0], t)
    log.tokens([1], 1999.5)
    log.done[:] = [2500.0, 1999.5]
    assert build_report(log, ReportConfig())["max_output_tokens_per_s"] == 3  # [1 s, 2 s)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.5, 1.0, 2.0, 7.25])),
                max_size=40),
       st.lists(st.tuples(st.sampled_from([0.5, 3.0]), st.integers(0, 4)), max_size=5),
       st.sets(st.integers(0, 5)))
def test_pooled_gaps_equal_the_sorted_multiset(gaps, shared, incomplete):
    """Run-length encoded gaps and first occurrences found without sorting (numpy), and the
    list version's, give the multiset and per-request first gaps that sorting every gap gives."""
    import numpy as np
    from servesim.report.stats import weighted_sorted
    from servesim.report.stats_arrays import weighted_sorted_array
    from servesim.report.summary import gaps as list_gaps
    from servesim.report.summary_arrays import gaps as array_gaps

    log = RequestLog([1] * 6)
    for rid, gap in gaps:
        log.itl.append(gap)
        log.itl_rid.append(rid)
    for value, weight in shared:
        log.shared_gap.append(value)
        log.shared_weight.append(weight)
    flags = [rid not in incomplete for rid in range(6)]
    kept = [(rid, g) for rid, g in gaps if rid not in incomplete]
    every = [g for _, g in kept] + [v for v, w in shared for _ in range(w)]
    firsts = {}
    for rid, g in kept:
        firsts.setdefault(rid, g)
    values, weights, ttst = array_gaps(log, np.array(flags))
    uniq, counts = weighted_sorted_array(values, weights)
    assert np.repeat(uniq, counts).tolist() == sorted(every)
    assert ttst.tolist() == [firsts[r] for r in sorted(firsts)]
    values, weights, ttst = list_gaps(log, flags)
    luniq, lcounts = weighted_sorted(values, weights)
    assert (luniq, lcounts) == (uniq.tolist(), counts.tolist())
    assert ttst == [firsts[r] for r in sorted(firsts)]


def test_table_shows_classes_lora_and_the_elastic_cluster():
    """The printed table gains a section per scenario feature the report has: SLO classes,
    LoRA adapters, an elastic cluster; a report without them prints none of these."""
    from servesim.report.summary import scenario_sections

    assert scenario_sections({}) == []
    report = {
        "classes": {"interactive": {"completed": 3, "submitted": 4, "p99_ttft_ms": 120.5,
                                    "sla_attainment": 0.75},
                    "batch": {"completed": 2, "submitted": 2, "p99_ttft_ms": None, "sla_attainment": None}},
        "lora": {"gpu_loads": 5, "disk_loads": 2, "load_ms": 10.25, "cpu_evictions": 0,
                 "gpu_evictions": 3, "requests": {"1": 4}},
        "elastic": {"gpu_seconds": 12.5, "scaling": [{}, {}], "requests": {"failed": 1, "retried": 2},
                    "faults": {"crashes": 1, "random_crashes": 1, "restarts": 2}},
    }
    assert scenario_sections(report) == [
        ("SLO classes", [("[interactive] completed / submitted", "3 / 4"),
                         ("[interactive] P99 TTFT (ms)", 120.5), ("[interactive] SLA attainment", 0.75),
                         ("[batch] completed / submitted", "2 / 2")]),
        ("LoRA adapters", [("Adapter loads into GPU slots", 5), ("Adapter loads from disk", 2),
                           ("Adapter load time (ms)", 10.25)]),
        ("Elastic cluster", [("GPU-seconds", 12.5), ("Scaling actions", 2),
                             ("Requests failed / retried", "1 / 2"), ("Crashes / restarts", "2 / 2")]),
    ]
