"""Host KV offload (G2) against the reference peer, from checked-in data.

``tests/golden/host_offload/make_golden.py`` ran Dynamo's mocker with ``native_host_offload``
on one prefix-heavy trace whose prefixes do not fit the G1 pool, and kept every request's
times, token count and admissions. The same trace and engine settings replay here through
servesim's loader and :func:`servesim.replay.runner.simulate` (the replayer processes the
rank's internal deadlines); every request must agree up to the peer's microsecond rounding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from servesim.config.loader import load_config
from servesim.replay.runner import SimResult, simulate

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "host_offload"
CASES = sorted(p.name.removesuffix(".expected.json") for p in GOLDEN.glob("*.expected.json"))
ABS_TOL_MS = 2e-3


def run_case(case: str, tmp_path: Path) -> tuple[dict[str, Any], SimResult]:
    expected = json.loads((GOLDEN / f"{case}.expected.json").read_text())
    cfg = {"engine": expected["engine"],
           "workload": {"trace": {"path": str(GOLDEN / expected["trace"]),
                                  "trace_block_size": expected["trace_block_size"]}}}
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return expected, simulate(load_config(str(path)))


def test_golden_cases_exist() -> None:
    assert {"no_host", "host_restores_prefixes", "host_lru_evicts", "host_instant",
            "host_tight_g1"} <= set(CASES)


# Under a G1 pool this tight (300 blocks, preemption while loads are in flight) the order in
# which parked, skipped and preempted requests meet differs from the reference after about 180
# of its 300 requests; the distributions still agree (test_tight_pool_agrees_in_distribution).
STATISTICAL = {"host_tight_g1"}


@pytest.mark.parametrize("case", [c for c in CASES if c not in STATISTICAL])
def test_matches_reference_peer(case: str, tmp_path: Path) -> None:
    expected, result = run_case(case, tmp_path)
    log = result.log
    assert log.n == len(expected["requests"])
    for rid, want in enumerate(expected["requests"]):
        assert log.arrival[rid] == pytest.approx(want["arrival_time_ms"], abs=ABS_TOL_MS)
        assert log.ntok[rid] == want["output_length"], rid
        assert log.first[rid] == pytest.approx(want["first_token_ms"], abs=ABS_TOL_MS), rid
        assert log.done[rid] == pytest.approx(want["terminal_time_ms"], abs=ABS_TOL_MS), rid
        assert log.reused[rid] == want["reused_input_tokens"], rid
        assert log.first_reused[rid] == want["admission_reused"][0], rid


def test_offload_lowers_ttft_and_reports_its_tiers(tmp_path: Path) -> None:
    _, off = run_case("no_host", tmp_path)
    expected, on = run_case("host_restores_prefixes", tmp_path)
    rep, base = on.report, off.report
    assert rep["mean_ttft_ms"] < 0.97 * base["mean_ttft_ms"]
    assert "host_offload" not in base and "prefix_cache_hit_rate_host" not in base
    # The tiers split the first-admission hit exactly.
    assert rep["prefix_cache_hit_rate_g1"] + rep["prefix_cache_hit_rate_host"] == pytest.approx(
        rep["first_admission_prefix_cache_hit_rate"], abs=2e-6)
    assert rep["prefix_cache_hit_rate_host"] > 0.1
    host = rep["host_offload"]
    block = 64 * 131072
    assert host["stored_bytes"] == host["stored_blocks"] * block
    assert host["loaded_bytes"] == host["loaded_blocks"] * block
    # Every prompt's full blocks were offered once: a store per request that had any.
    lengths = [json.loads(line)["input_length"]
               for line in (GOLDEN / expected["trace"]).read_text().splitlines()]
    assert host["stores"] == sum(1 for n in lengths if n >= 64)
    assert host["evicted_blocks"] == 0 and host["cancelled_loads"] == 0


def test_small_host_tier_evicts_in_lru_order(tmp_path: Path) -> None:
    _, result = run_case("host_lru_evicts", tmp_path)
    host = result.report["host_offload"]
    # 1,500 host blocks: resident blocks never exceed capacity, so stores beyond it evict.
    assert host["stored_blocks"] - host["evicted_blocks"] <= 1500
    assert host["evicted_blocks"] > 0


def test_tight_pool_agrees_in_distribution(tmp_path: Path) -> None:
    expected, result = run_case("host_tight_g1", tmp_path)
    log = result.log
    reqs = expected["requests"]
    assert [log.ntok[i] for i in range(log.n)] == [r["output_length"] for r in reqs]
    for ours, theirs in (
        ([log.first[i] - log.arrival[i] for i in range(log.n)],
         [r["first_token_ms"] - r["arrival_time_ms"] for r in reqs]),
        ([log.done[i] - log.arrival[i] for i in range(log.n)],
         [r["terminal_time_ms"] - r["arrival_time_ms"] for r in reqs]),
    ):
        assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.01)
        assert np.percentile(ours, 99) == pytest.approx(np.percentile(theirs, 99), rel=0.01)
    exact = sum(abs(log.first[i] - r["first_token_ms"]) < ABS_TOL_MS for i, r in enumerate(reqs))
    assert exact >= 150  # the first ~180 requests agree one for one
