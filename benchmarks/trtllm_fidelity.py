"""Randomised fidelity check of the trtllm backend (guaranteed_no_evict) against the reference.

    python benchmarks/trtllm_fidelity.py [--seeds 0:60]

For each seed: a random Mooncake trace (/work/shared/tools/make_trace.py: 10-40 requests,
shared prefixes, varied prompt/output lengths and rates) and a random engine config (pool
size, max_num_seqs, max_num_batched_tokens, chunked prefill and prefix caching on/off,
block size) run through the reference (peer_dynamo.py, ``engine_type=trtllm``) and through
servesim; every request's first-token time, completion time, token count, reused prefix
and rejection must agree (relative 1e-6). Needs the reference; never run by the tests.
Last run: seeds 0-59 all agree.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.testing.driver import drive
from servesim.timing.builtin import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens
from servesim_trtllm.rank import TrtllmRank

TOOLS = Path("/work/shared/tools")
TRACE_BLOCK = 64


def scenario(seed: int, tmp: Path) -> tuple[Path, dict[str, Any]]:
    rng = random.Random(seed)
    trace = tmp / f"fuzz{seed}.jsonl"
    args = [
        sys.executable, str(TOOLS / "make_trace.py"), "-n", str(rng.randint(10, 40)),
        "--rate", str(rng.choice([5, 30, 200])),
        "--isl", rng.choice(["uniform:1:300", "uniform:50:2000", "choice:64,128,192,256"]),
        "--osl", rng.choice(["uniform:1:50", "uniform:1:300", "choice:1,2"]),
        "--block-size", str(TRACE_BLOCK), "--prefix-groups", "3", "--prefix-frac", "0.7",
        "--prefix-ratio", str(rng.choice([0.3, 0.9, 1.0])), "--seed", str(seed), "-o", str(trace),
    ]  # fmt: skip
    subprocess.run(args, check=True, capture_output=True)
    lines = [json.loads(s) for s in trace.read_text().splitlines() if s.strip()]
    seen: set[int] = set()
    for d in lines:  # the reference identifies requests by arrival: make them distinct
        while d["timestamp"] in seen:
            d["timestamp"] += 1
        seen.add(d["timestamp"])
    lines.sort(key=lambda d: d["timestamp"])
    trace.write_text("".join(json.dumps(d) + "\n" for d in lines))
    engine: dict[str, Any] = {}
    if rng.random() < 0.6:
        engine["num_gpu_blocks"] = rng.choice([40, 80, 200, 1000])
    if rng.random() < 0.5:
        engine["max_num_seqs"] = rng.choice([1, 2, 4, 16])
    if rng.random() < 0.5:
        engine["max_num_batched_tokens"] = rng.choice([64, 256, 512, 2048])
    if rng.random() < 0.3:
        engine["enable_chunked_prefill"] = False
        if engine.get("max_num_batched_tokens", 8192) < 2000:
            engine["max_num_batched_tokens"] = 4096  # the reference stalls on longer prompts
    if rng.random() < 0.3:
        engine["enable_prefix_caching"] = False
    if rng.random() < 0.2:
        engine["block_size"] = rng.choice([16, 64])
    return trace, engine


def reference(trace: Path, engine: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    cfg, report = tmp / "cfg.json", tmp / "report.jsonl"
    cfg.write_text(json.dumps({"engine": engine}))
    cmd = [sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace), "-c", str(cfg),
           "--set", "engine_type=trtllm", "--set", f"trace_block_size={TRACE_BLOCK}",
           "--set", f"report_jsonl_path={report}"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [json.loads(s) for s in report.read_text().splitlines() if s.strip()]
    return sorted(rows, key=lambda d: d["arrival_time_ms"])


def servesim(trace: Path, engine: dict[str, Any]) -> list[Any]:
    lines = [json.loads(s) for s in trace.read_text().splitlines() if s.strip()]
    t0 = lines[0]["timestamp"]
    reqs = [
        (
            float(d["timestamp"] - t0),
            Request(
                i, RepeatedBlockTokens(d["hash_ids"], TRACE_BLOCK, d.get("input_length")), d["output_length"]
            ),
        )
        for i, d in enumerate(lines)
    ]
    factory = EngineFactory(EngineConfig(backend="trtllm", **engine), TrtllmRank, PolynomialTiming())
    result = drive(factory.build(0), reqs)
    return sorted(result.requests.values(), key=lambda t: t.arrival_ms)


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def compare(rows: list[dict[str, Any]], traces: list[Any]) -> list[str]:
    if len(rows) != len(traces):
        return [f"{len(rows)} reference requests, {len(traces)} servesim requests"]
    out = []
    for d, t in zip(rows, traces, strict=True):
        if (d["terminal_status"] == "rejected") != t.rejected:
            out.append(f"arrival {t.arrival_ms}: rejection differs")
        elif not t.rejected and not (
            _close(t.first_token_ms, d["first_token_ms"])
            and _close(t.completed_ms, d["terminal_time_ms"])
            and len(t.token_times) == d["output_length"]
            and (t.cached_tokens or 0) == d["reused_input_tokens"]
        ):
            out.append(f"arrival {t.arrival_ms}: reference {d['first_token_ms']}/"
                       f"{d['terminal_time_ms']}, servesim {t.first_token_ms}/{t.completed_ms}")  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:60", help="range LO:HI")
    lo, hi = (int(x) for x in parser.parse_args().seeds.split(":"))
    failed = 0
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for seed in range(lo, hi):
            trace, engine = scenario(seed, tmp)
            problems = compare(reference(trace, engine, tmp), servesim(trace, engine))
            failed += bool(problems)
            print(f"seed {seed} {engine}: {'OK' if not problems else problems[:3]}", flush=True)
    print(f"{hi - lo - failed}/{hi - lo} seeds agree")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
