"""The agentic formats against the reference (Dynamo 1.6.1's replay), from checked-in data.

``tests/golden/agentic/make_golden.py`` wrote the sample traces (a Weka corpus with absolute
and one with relative nested timestamps, an agentic Mooncake v2 file, Dynamo request traces
with and without agent contexts) and ran the reference
on each case through ``benchmarks/peer_dynamo_agentic.py``; CI only reads its reports. Each
case replays through ``servesim run``'s path (vLLM ranks unless the case sets SGLang's or
TensorRT-LLM's as the reference's ``engine_type``, the default polynomial timing, the same
engine keys) and must match request for request: arrival, TTFT, end-to-end latency,
output length and the cached tokens of the first admission, within the tolerance the vLLM
Mooncake goldens use (plugins/vllm/tests/test_golden.py: exact up to the reference's
microsecond rounding).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.config.loader import load_config
from servesim.plugins import Plugins
from servesim.replay.runner import simulate
from servesim.report.summary import per_request_lines

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden" / "agentic"
CASES = sorted(p.name.removesuffix(".expected.json") for p in GOLDEN.glob("*.expected.json"))
ABS_TOL_MS = 2e-3


def replay(case: str, tmp_path: Path) -> tuple[dict, dict[int, dict]]:
    expected = json.loads((GOLDEN / f"{case}.expected.json").read_text())
    cfg = tmp_path / "c.yaml"
    engine = ", ".join(f"{k}: {v}" for k, v in expected["engine"].items())
    cfg.write_text(f"engine: {{{engine}}}\nworkload:\n  trace: {{path: {GOLDEN / expected['trace']}, "
                   f"format: {expected['format']}}}\n")
    res = simulate(load_config(str(cfg), list(expected["servesim_sets"]), Plugins()))
    out = {r["request_id"]: r for r in map(json.loads, per_request_lines(res.log, res.session_ids))}
    return expected, out


def test_golden_cases_exist() -> None:
    assert {"weka_auto", "weka_relative", "weka_relative_as_absolute", "weka_tight_pool",
            "weka_max_sim_time", "v2_sample", "v2_tight_pool", "dynamo_request_agentic",
            "dynamo_request_tight_pool", "dynamo_request_standard", "weka_lanes", "v2_lanes",
            "dynamo_request_lanes", "weka_sglang", "weka_trtllm", "dynamo_request_sglang_tight_pool",
            "dynamo_request_trtllm_tight_pool"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(case: str, tmp_path: Path) -> None:
    expected, got = replay(case, tmp_path)
    want_done = {w["node"]: w for w in expected["requests"]}
    if "max_sim_time_ms" in expected["peer_keys"]:
        # the reference reports the requests that finished by the stop; servesim's per-request
        # output marks the others cut off
        cut = {i for i, g in got.items() if g["cut_off"]}
        assert cut and cut.isdisjoint(want_done)
        got = {i: g for i, g in got.items() if not g["cut_off"]}
    assert len(got) == len(want_done)
    for rid, want in want_done.items():
        g = got[rid]
        arrival = want["arrival_time_ms"]
        assert g["arrival_ms"] == pytest.approx(arrival, rel=0, abs=ABS_TOL_MS), f"request {rid}"
        assert g["num_output_tokens"] == want["output_length"], f"request {rid}"
        assert g["completion_ms"] - g["arrival_ms"] == pytest.approx(
            want["terminal_time_ms"] - arrival, rel=0, abs=ABS_TOL_MS), f"request {rid}"
        if want["first_token_ms"] is not None:
            assert g["first_token_ms"] - g["arrival_ms"] == pytest.approx(
                want["first_token_ms"] - arrival, rel=0, abs=ABS_TOL_MS), f"request {rid}"
        assert g["cached_tokens"] == want["first_admission_reused_tokens"], f"request {rid}"
