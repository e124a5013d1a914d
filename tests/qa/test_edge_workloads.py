"""Edge workloads run to completion with sane reports (issue 4): no NaN/inf in the JSON,
percentiles of empty sets are 0 (docs/report.md), statistics are ordered, every backend and
the prefill/decode split run from ``--set`` alone."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from servesim.cli.main import main

METRICS = ("ttft", "tpot", "itl", "e2el")


def _no_constants(name: str) -> Any:
    raise AssertionError(f"non-finite number {name} in the report JSON")


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    rc = main(["run", *args, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    report: dict[str, Any] = json.loads(out, parse_constant=_no_constants)
    check_sane(report)
    return report


def check_sane(report: dict[str, Any]) -> None:
    """Invariants every report holds, whatever the workload."""
    assert report["completed"] + report["failed"] == report["num_requests"]
    for m in METRICS:
        names = [f"{p:g}" for p in sorted(report["percentiles"])]
        stats = [report[f"p{name}_{m}_ms"] for name in names]
        assert 0.0 <= min(stats) and stats == sorted(stats), m
        assert stats[-1] <= report[f"max_{m}_ms"]
        assert report[f"median_{m}_ms"] == report.get(f"p50_{m}_ms", report[f"median_{m}_ms"])
        assert report[f"std_{m}_ms"] >= 0.0
    for key, value in report.items():
        if isinstance(value, float):
            assert math.isfinite(value), key
    if report["completed"]:
        assert report["duration"] > 0
        assert report["request_throughput"] == pytest.approx(
            report["completed"] / report["duration"], rel=1e-5
        )
        assert report["mean_ttft_ms"] <= report["mean_e2el_ms"]


def synthetic(n: int, *sets: str) -> list[str]:
    out = ["--set", f"workload.synthetic.num_requests={n}"]
    for item in sets:
        out += ["--set", item]
    return out


def test_zero_requests_every_statistic_is_zero(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, *synthetic(0, "report.sla_ttft_ms=100"))
    assert (report["num_requests"], report["completed"], report["failed"]) == (0, 0, 0)
    assert report["duration"] == 0.0 and report["request_throughput"] == 0.0
    assert all(report[f"{s}_{m}_ms"] == 0.0 for s in ("mean", "p99", "max", "std") for m in METRICS)
    assert report["goodput_completed"] == 0


def test_empty_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n   \n")
    report = run_json(capsys, "--trace", str(trace))
    assert (report["num_requests"], report["completed"]) == (0, 0)


def test_one_request(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, *synthetic(1, "workload.synthetic.output_length=fixed:10"))
    assert (report["completed"], report["total_output_tokens"]) == (1, 10)
    # One sample: every percentile is that sample and the spread is 0.
    assert report["p99_ttft_ms"] == report["p50_ttft_ms"] == report["mean_ttft_ms"] > 0
    assert report["std_ttft_ms"] == 0.0


def test_zero_output_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """Completed requests without tokens count in ``completed`` but add no latency sample."""
    report = run_json(capsys, *synthetic(5, "workload.synthetic.output_length=fixed:0"))
    assert (report["completed"], report["total_output_tokens"]) == (5, 0)
    assert report["mean_ttft_ms"] == report["mean_itl_ms"] == 0.0
    assert report["duration"] > 0


def test_one_token_prompts(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(
        capsys,
        *synthetic(5, "workload.synthetic.input_length=fixed:1", "workload.synthetic.output_length=fixed:3"),
    )
    assert (report["completed"], report["total_input_tokens"], report["total_output_tokens"]) == (5, 5, 15)
    assert report["prefix_cache_hit_rate"] == 0.0


@pytest.mark.parametrize("limit", ["engine.num_gpu_blocks=2", "engine.max_model_len=100"])
def test_all_requests_rejected(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    report = run_json(capsys, *synthetic(5, limit, "workload.synthetic.input_length=fixed:512"))
    assert (report["completed"], report["failed"]) == (0, 5)
    assert report["mean_e2el_ms"] == 0.0 and report["total_output_tokens"] == 0
    assert report["duration"] == 0.0 and report["output_throughput"] == 0.0  # docs/report.md


def test_prompt_equal_to_max_model_len_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(
        capsys, *synthetic(3, "engine.max_model_len=512", "workload.synthetic.input_length=fixed:512")
    )
    assert (report["completed"], report["failed"]) == (0, 3)


def test_all_at_the_same_timestamp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": 7, "input_length": 200, "output_length": 4, "hash_ids": [i]} for i in range(30)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = run_json(capsys, "--trace", str(trace))
    assert (report["completed"], report["total_output_tokens"]) == (30, 120)
    assert report["max_concurrent_requests"] == 30


def test_concurrency_larger_than_the_workload(capsys: pytest.CaptureFixture[str]) -> None:
    capped = run_json(capsys, *synthetic(20, "workload.concurrency=1000"))
    burst = run_json(capsys, *synthetic(20, "workload.concurrency=20"))
    assert capped["completed"] == 20
    # Every session starts at once either way: N above the session count changes nothing.
    assert {k: v for k, v in capped.items() if k != "config"} == {
        k: v for k, v in burst.items() if k != "config"
    }


def test_huge_arrival_speedup_is_a_burst(capsys: pytest.CaptureFixture[str]) -> None:
    fast = run_json(capsys, *synthetic(20, "workload.arrival_speedup_ratio=1e300"))
    assert fast["completed"] == 20
    assert fast["max_concurrent_requests"] == 20


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_every_backend_with_dp_and_workers(capsys: pytest.CaptureFixture[str], backend: str) -> None:
    report = run_json(
        capsys,
        *synthetic(
            30, f"engine.backend={backend}", "engine.dp_size=2", "cluster.workers=2", "cluster.router=kv"
        ),
    )
    assert (report["completed"], report["config"]["engine"]["backend"]) == (30, backend)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_disaggregated_split(capsys: pytest.CaptureFixture[str], backend: str) -> None:
    report = run_json(
        capsys,
        *synthetic(20, f"engine.backend={backend}", "cluster.prefill_workers=1", "cluster.decode_workers=2"),
    )
    assert (report["completed"], report["num_handoffs"]) == (20, 20)
    parts = report["mean_ttft_prefill_ms"] + report["mean_ttft_transfer_ms"] + report["mean_ttft_decode_ms"]
    assert parts == pytest.approx(report["mean_ttft_ms"], abs=1e-5)


def test_disaggregated_split_with_no_requests(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, *synthetic(0, "cluster.prefill_workers=1", "cluster.decode_workers=1"))
    assert (report["completed"], report["num_handoffs"], report["mean_kv_transfer_ms"]) == (0, 0, 0.0)


def test_extreme_percentiles(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_json(capsys, *synthetic(5, "report.percentiles=[0, 99.9, 100]"))
    assert report["p100_ttft_ms"] == report["max_ttft_ms"]
    assert report["p0_ttft_ms"] <= report["p99.9_ttft_ms"] <= report["p100_ttft_ms"]


def test_heavy_tailed_lengths_are_clipped(capsys: pytest.CaptureFixture[str]) -> None:
    """A lognormal spec whose draws overflow a float is clipped to its HI bound, not a crash."""
    report = run_json(
        capsys,
        *synthetic(
            4,
            "workload.synthetic.input_length=lognormal:100:400:1:3000",
            "workload.synthetic.output_length=normal:5:1000:0:7",
        ),
    )
    assert report["completed"] == 4
    assert report["total_input_tokens"] <= 4 * 3000 and report["total_output_tokens"] <= 4 * 7
