"""GUARANTEED_NO_EVICT against the reference (Dynamo's mocker, ``engine_type: trtllm``).

Each case under ``tests/golden/trtllm/`` holds a Mooncake trace, the engine config and the
reference's per-request results (``regen.py`` there re-creates them). The trace is replayed
through one servesim engine with the minimal driver; TTFT, completion time and token count
must match within 0.5 %, and reused prefix tokens exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.testing.driver import RequestTrace, drive
from servesim.timing.builtin import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens
from servesim_trtllm.config import TrtllmConfig
from servesim_trtllm.rank import TrtllmRank

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden" / "trtllm"
TRACE_BLOCK_SIZE = 64
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.json").exists())
REL = 0.005


def load_trace(path: Path) -> list[tuple[float, Request]]:
    """Mooncake lines → ``(arrival_ms, Request)``; ids are line numbers, arrivals rebased to
    the first line as the reference does (dynamo-mocker.md §9.1-§9.2)."""
    lines = [json.loads(s) for s in path.read_text().splitlines() if s.strip()]
    t0 = lines[0]["timestamp"]
    out = []
    for i, d in enumerate(lines):
        prompt = RepeatedBlockTokens(d["hash_ids"], TRACE_BLOCK_SIZE, d.get("input_length"))
        out.append((float(d["timestamp"] - t0), Request(i, prompt, d["output_length"])))
    return out


def run_case(name: str) -> tuple[list[list[Any]], dict[int, RequestTrace]]:
    case = GOLDEN / name
    engine_keys = json.loads((case / "config.json").read_text())["engine"]
    config = EngineConfig(backend="trtllm", **engine_keys)
    factory = EngineFactory(config, TrtllmRank, PolynomialTiming(), backend_config=TrtllmConfig())
    result = drive(factory.build(0), load_trace(case / "trace.jsonl"))
    expected = json.loads((case / "expected.json").read_text())["requests"]
    return expected, result.requests


@pytest.mark.parametrize("name", CASES)
def test_matches_reference(name: str) -> None:
    expected, traces = run_case(name)
    assert len(traces) == len(expected)
    by_arrival = sorted(traces.values(), key=lambda t: (t.arrival_ms, t.request_id))
    for row, trace in zip(expected, by_arrival, strict=True):
        arrival, first, terminal, n_out, reused, status = row
        assert trace.arrival_ms == arrival
        assert trace.completed_ms == pytest.approx(terminal, rel=REL), trace.request_id
        assert len(trace.token_times) == n_out
        if status == "rejected":
            assert trace.rejected and first is None
            continue
        assert status == "completed" and not trace.rejected
        assert trace.ttft_ms == pytest.approx(first - arrival, rel=REL), trace.request_id
        assert (trace.cached_tokens or 0) == reused, trace.request_id


def test_cases_exist_and_stress_capacity() -> None:
    """The set covers the issue's shapes: ≥3 traces of 20-60 requests, one with a small pool
    in which admission really waits (some request is admitted long after it arrived), and
    an edge-case trace (fully cached prompts, one-token outputs, a rejection)."""
    sizes = {}
    for name in CASES:
        rows = json.loads((GOLDEN / name / "expected.json").read_text())["requests"]
        assert len({r[0] for r in rows}) == len(rows)  # distinct arrivals identify requests
        sizes[name] = len(rows)
    assert sum(20 <= n <= 60 for n in sizes.values()) >= 3
    edge = json.loads((GOLDEN / "edge_cases" / "expected.json").read_text())["requests"]
    assert [r[5] for r in edge].count("rejected") == 1
    assert all(r[1] is None or r[1] > r[0] for r in edge)  # a cached prompt still costs a call
    assert any(r[4] == 128 for r in edge)
    small = json.loads((GOLDEN / "small_pool" / "expected.json").read_text())["requests"]
    assert max(first - arrival for arrival, first, *_ in small) > 1000.0
    assert any(r[4] > 0 for r in small)
