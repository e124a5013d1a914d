"""Golden parity with the reference implementation (Dynamo 1.6.1 mocker, engine_type=sglang).

Each case in ``tests/golden/sglang`` is a Mooncake trace (64 tokens per hash id) plus the
reference's per-request report, produced by ``regenerate.py`` there. The trace is replayed
through servesim with :func:`servesim.testing.driver.drive` and the default polynomial timing;
per request the TTFT and the completion time must agree within 1 %, the token count and the
largest prompt reuse over the request's admissions exactly (the reference report's
``reused_input_tokens`` of a retracted, readmitted request is the larger of its admissions').
Today they agree to ~1e-8 ms.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.testing.driver import drive
from servesim.timing.builtin import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens
from servesim_sglang.config import SglangConfig
from servesim_sglang.rank import SglangRank

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden" / "sglang"
TRACE_BLOCK_SIZE = 64
CASES = sorted(p.name[: -len(".json")] for p in GOLDEN.glob("*.json"))


def read_trace(path: Path, dp_size: int = 1) -> list[tuple[float, Request, int]]:
    """Mooncake JSONL → ``(arrival_ms, Request, dp_rank)``; prompts are lazy repeated-block
    tokens; ranks alternate like the reference's round-robin placement."""
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        row = json.loads(line)
        prompt = RepeatedBlockTokens(row["hash_ids"], TRACE_BLOCK_SIZE, row["input_length"])
        out.append((float(row["timestamp"]), Request(i, prompt, row["output_length"]), i % dp_size))
    return out


def build_engine(config: dict):
    engine_keys = {k: v for k, v in config.items() if k != "sglang"}
    engine_config = EngineConfig(backend="sglang", **engine_keys)
    sglang = SglangConfig(**config.get("sglang", {}))
    factory = EngineFactory(engine_config, SglangRank, PolynomialTiming(), backend_config=sglang)
    return factory.build(0)


def max_reuse(result) -> dict[int, int]:
    reuse: dict[int, int] = {}
    for started in result.passes:
        for rank in started.by_rank:
            for a in rank.effects.admissions:
                reuse[a.request_id] = max(reuse.get(a.request_id, 0), a.reused_input_tokens)
    return reuse


def test_golden_cases_present() -> None:
    assert CASES == ["dp2_retraction", "lpm_queue", "page16_chunked", "prefix_fcfs", "retraction",
                     "spec_accept_all", "spec_retraction"]


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(case: str) -> None:
    doc = json.loads((GOLDEN / f"{case}.json").read_text())
    arrivals = read_trace(GOLDEN / f"{case}.trace.jsonl", doc["config"].get("dp_size", 1))
    result = drive(build_engine(doc["config"]), arrivals)
    reuse = max_reuse(result)
    assert len(doc["expected"]) == len(arrivals)
    mismatches = []
    for (arrival, req, _), (exp_arrival, first, terminal, n_out, reused) in zip(
        arrivals, doc["expected"], strict=True
    ):
        assert arrival == exp_arrival
        trace = result.requests[req.request_id]
        ttft, exp_ttft = trace.first_token_ms - arrival, first - arrival
        e2e, exp_e2e = trace.completed_ms - arrival, terminal - arrival
        ok = (
            abs(ttft - exp_ttft) <= 0.01 * exp_ttft
            and abs(e2e - exp_e2e) <= 0.01 * exp_e2e
            and len(trace.token_times) == n_out
            and reuse.get(req.request_id) == reused
        )
        if not ok:
            mismatches.append((arrival, (ttft, e2e, len(trace.token_times), reuse.get(req.request_id))))
    assert mismatches == []


def test_retraction_case_really_retracts() -> None:
    doc = json.loads((GOLDEN / "retraction.json").read_text())
    arrivals = read_trace(GOLDEN / "retraction.trace.jsonl")
    result = drive(build_engine(doc["config"]), arrivals)
    events = [e for p in result.passes for r in p.by_rank for e in r.effects.pressure_events]
    admissions = [a for p in result.passes for r in p.by_rank for a in r.effects.admissions]
    assert doc["readmissions"] == 3
    assert len(events) == 3
    assert len(admissions) == len(arrivals) + 3
