"""Disaggregated replay against the reference peer, from checked-in data.

``tests/golden/disagg/make_golden.py`` ran Dynamo's mocker (``mode=disagg``,
``router_mode=kv_router``) on each trace and kept every request's times, token count, reused
tokens, handoff timestamps and workers. Here the same trace and engine settings go through
servesim's loader and :func:`servesim.replay.runner.simulate` with ``cluster.router: kv``.
Issue 7 asks for TTFT, token counts and completion times within 1 %. With one slot per
pool (one worker each, no attention DP) servesim reproduces them, and every handoff
timestamp, up to the peer's microsecond rounding, so that is what is asserted. With more
slots the reference breaks routing ties at random and its per-request results change from
run to run; there the golden data keeps five runs' summaries, and servesim's mean TTFT,
mean E2E latency and duration must lie within 1 % of their mean, or within twice the
reference's own spread (max - min over its runs) where that is wider — with attention DP
the reference's mean TTFT moves by about 1.3 % between runs on this small trace. Token
counts stay exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from servesim.config.loader import load_config
from servesim.replay.runner import SimResult, simulate

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "disagg"
CASES = sorted(p.name.removesuffix(".expected.json") for p in GOLDEN.glob("*.expected.json"))
ABS_TOL_MS = 2e-3
HANDOFF_TIMES = ("prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
                 "destination_activated_ms", "decode_admit_ms", "source_released_ms")


def run_case(case: str, tmp_path: Path) -> tuple[dict[str, Any], SimResult]:
    expected = json.loads((GOLDEN / f"{case}.expected.json").read_text())
    prefill, decode = expected["workers"]
    cfg = {
        "engine": {"backend": expected.get("backend", "vllm"), **expected["engine"],
                   **expected["launch"]},
        "cluster": {
            "router": "kv",
            "prefill_workers": prefill,
            "decode_workers": decode,
            "prefill_engine": expected["prefill_engine"],
            "decode_engine": expected["decode_engine"],
        },
        "workload": {"trace": {"path": str(GOLDEN / f"{case}.trace.jsonl"),
                               "trace_block_size": expected["trace_block_size"]}},
    }
    path = tmp_path / "sim.yaml"
    path.write_text(json.dumps(cfg))
    return expected, simulate(load_config(str(path)))


def test_golden_cases_exist() -> None:
    assert {"vllm_1p1d", "vllm_2p2d", "vllm_1p1d_dp2", "vllm_tight_decode",
            "vllm_no_transfer_time", "vllm_destination_missing", "trtllm_1p1d",
            "trtllm_tight_decode", "sglang_1p1d", "sglang_tight_decode", "vllm_tight_prefill",
            "trtllm_tight_prefill", "sglang_tight_prefill"} <= set(CASES)


def test_destination_missing_transfers_only_what_the_decode_worker_lacks(tmp_path: Path) -> None:
    """The decode worker reuses resident prefix blocks; only fresh blocks are sent."""
    _expected, result = run_case("vllm_destination_missing", tmp_path)
    extra = result.log.extra  # type: ignore[attr-defined]
    lengths = result.log.input_length
    full = [n * 131072 / 1e9 * 1e3 for n in lengths]
    shorter = [i for i, t in enumerate(extra["kv_transfer_ms"]) if t < full[i] - 1e-9]
    assert len(shorter) >= 10
    for i, t in enumerate(extra["kv_transfer_ms"]):
        blocks = round(t / (64 * 131072 / 1e9 * 1e3))  # whole fresh blocks of 64 tokens
        assert t == pytest.approx(blocks * 64 * 131072 / 1e6), i


def is_exact(expected: dict[str, Any]) -> bool:
    return expected["workers"] == [1, 1] and expected["launch"].get("dp_size", 1) == 1


@pytest.mark.parametrize("case", CASES)
def test_matches_reference_peer(case: str, tmp_path: Path) -> None:
    expected, result = run_case(case, tmp_path)
    if not is_exact(expected):
        check_summary(expected, result)
        return
    log = result.log
    extra = log.extra  # type: ignore[attr-defined]
    assert log.n == len(expected["requests"])
    for rid, want in enumerate(expected["requests"]):
        arrival = log.arrival[rid]
        assert arrival == pytest.approx(want["arrival_time_ms"], abs=ABS_TOL_MS)
        assert log.rejected[rid] is want["rejected"], f"request {rid}"
        assert log.ntok[rid] == want["output_length"], f"request {rid}"
        assert log.reused[rid] == want["reused_input_tokens"], f"request {rid}"
        ttft = log.first[rid] - arrival
        assert ttft == pytest.approx(want["first_token_ms"] - arrival, rel=0.01, abs=ABS_TOL_MS)
        assert log.first[rid] == pytest.approx(want["first_token_ms"], abs=ABS_TOL_MS), rid
        assert log.done[rid] == pytest.approx(want["terminal_time_ms"], abs=ABS_TOL_MS), rid
        for key in HANDOFF_TIMES:
            assert extra[key][rid] == pytest.approx(want[key], abs=ABS_TOL_MS), (rid, key)
        assert extra["prefill_worker"][rid] == want["prefill_worker_idx"], rid
        assert log.worker[rid] - expected["workers"][0] == want["decode_worker_idx"], rid


def check_summary(expected: dict[str, Any], result: SimResult) -> None:
    log = result.log
    reqs = expected["requests"]
    # Requests are identified by arrival time (the peer's report has no trace line).
    assert sorted(zip(log.arrival, log.ntok, strict=True)) == sorted(
        (r["arrival_time_ms"], r["output_length"]) for r in reqs
    )
    assert not any(log.rejected)
    runs = expected["peer_runs"]
    n = log.n
    ours = {
        "mean_ttft_ms": sum(log.first[i] - log.arrival[i] for i in range(n)) / n,
        "mean_e2e_ms": sum(log.done[i] - log.arrival[i] for i in range(n)) / n,
        "duration_ms": max(log.done),
    }
    for key, value in ours.items():
        values = [r[key] for r in runs]
        peer = sum(values) / len(values)
        tolerance = max(0.01 * peer, 2 * (max(values) - min(values)))
        assert abs(value - peer) <= tolerance, (key, value, values)
    slots = {(w, d) for w, d in zip(log.worker, log.dp_rank, strict=True)}
    prefill = expected["workers"][0]
    dp = expected["launch"].get("dp_size", 1)
    assert len(slots) == expected["workers"][1] * dp  # every decode slot was used
    assert all(w >= prefill for w, _ in slots)


def test_report_splits_ttft_into_prefill_transfer_and_decode(tmp_path: Path) -> None:
    expected, result = run_case("vllm_1p1d", tmp_path)
    rep = result.report
    reqs = expected["requests"]
    n = len(reqs)
    prefill = sum(r["source_held_ms"] - r["arrival_time_ms"] for r in reqs) / n
    transfer = sum(r["destination_activated_ms"] - r["source_held_ms"] for r in reqs) / n
    decode = sum(r["first_token_ms"] - r["destination_activated_ms"] for r in reqs) / n
    assert rep["num_handoffs"] == n
    assert rep["mean_ttft_prefill_ms"] == pytest.approx(prefill, abs=1e-3)
    assert rep["mean_ttft_transfer_ms"] == pytest.approx(transfer, abs=1e-3)
    assert rep["mean_ttft_decode_ms"] == pytest.approx(decode, abs=1e-3)
    assert rep["mean_ttft_ms"] == pytest.approx(prefill + transfer + decode, abs=1e-3)
    # 131072 B/token at 2 GB/s: 0.065536 ms per prompt token (full_prompt mode).
    tokens = [json.loads(line)["input_length"]
              for line in (GOLDEN / "vllm_1p1d.trace.jsonl").read_text().splitlines()]
    assert rep["mean_kv_transfer_ms"] == pytest.approx(
        sum(t * 131072 / 2e9 * 1e3 for t in tokens) / n, abs=1e-3
    )
    util = rep["worker_utilization"]
    assert 0 < util["prefill"] < 1 and 0 < util["decode"] <= 1
