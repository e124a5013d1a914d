"""End to end through servesim's loader and Replayer (what ``servesim run`` does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.config.loader import load_config
from servesim.replay.runner import simulate

CASE = Path(__file__).resolve().parents[3] / "tests" / "golden" / "trtllm" / "small_pool"


def _run(policy: str) -> dict[str, float]:
    loaded = load_config(
        None,
        [
            "engine.backend=trtllm",
            "engine.num_gpu_blocks=120",
            f"engine.trtllm.capacity_scheduler_policy={policy}",
            f"workload.trace.path={CASE / 'trace.jsonl'}",
            "workload.trace.trace_block_size=64",
        ],
    )
    return simulate(loaded).report


def test_replay_matches_reference_summary() -> None:
    """Mean TTFT and duration of the reference's report on the small-pool golden trace."""
    expected = json.loads((CASE / "expected.json").read_text())["requests"]
    report = _run("guaranteed_no_evict")
    mean_ttft = sum(r[1] - r[0] for r in expected) / len(expected)
    assert report["completed"] == len(expected)
    assert report["mean_ttft_ms"] == pytest.approx(mean_ttft, rel=1e-6)
    assert report["duration_ms"] == pytest.approx(max(r[2] for r in expected), rel=1e-6)


def test_policies_run_through_the_cli_path() -> None:
    """Same trace, three policies: all complete; packing beats reservation here, and static
    batching is slowest (see docs/trtllm-policies.md)."""
    reports = {p: _run(p) for p in ("guaranteed_no_evict", "max_utilization", "static_batch")}
    assert {r["completed"] for r in reports.values()} == {40}
    durations = {p: r["duration_ms"] for p, r in reports.items()}
    assert durations["max_utilization"] < durations["guaranteed_no_evict"] < durations["static_batch"]
    pauses = {p: r["num_preemptions"] for p, r in reports.items()}
    assert pauses["max_utilization"] > 0 and pauses["guaranteed_no_evict"] == pauses["static_batch"] == 0
