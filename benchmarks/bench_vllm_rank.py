#!/usr/bin/env python3
"""Requests simulated per wall second: one VllmRank driven by ``servesim.testing.driver.drive``.

    python benchmarks/bench_vllm_rank.py [-n 10000] [--peer /work/shared/tools/peer_dynamo.py]

The trace is generated inline (fixed seed): Poisson arrivals at 8 req/s, input lengths
uniform in [1024, 4096], output lengths uniform in [128, 512], every prompt block unique
(Mooncake hash ids, 64 tokens per id), engine defaults (vLLM block size 64, 16384 blocks,
polynomial timing), committing runs of decode passes (servesim.fast.runs) unless ``--step``.
With ``--peer`` the same trace also runs through the reference peer and its own
requests-per-wall-second figure is printed beside servesim's.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.testing.driver import drive
from servesim.timing import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens
from servesim_vllm.rank import VllmRank

TRACE_BLOCK = 64


def make_rows(n: int, rate: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows, t, next_id = [], 0.0, 0
    for _ in range(n):
        t += rng.expovariate(rate) * 1000.0
        isl = rng.randint(1024, 4096)
        osl = rng.randint(128, 512)
        nblocks = -(-isl // TRACE_BLOCK)
        rows.append({"timestamp": int(round(t)), "input_length": isl, "output_length": osl,
                     "hash_ids": list(range(next_id, next_id + nblocks))})
        next_id += nblocks
    # Distinct integer timestamps keep per-request matching with the peer unambiguous.
    for i in range(1, n):
        if rows[i]["timestamp"] <= rows[i - 1]["timestamp"]:
            rows[i]["timestamp"] = rows[i - 1]["timestamp"] + 1
    return rows


def run_servesim(rows: list[dict], fpm: bool, runs: bool = True) -> tuple[float, float, float]:
    arrivals = [
        (float(r["timestamp"]),
         Request(i, RepeatedBlockTokens(r["hash_ids"], TRACE_BLOCK, r["input_length"]), r["output_length"]))
        for i, r in enumerate(rows)
    ]
    factory = EngineFactory(EngineConfig(), VllmRank, PolynomialTiming(),
                            emit_forward_pass_metrics=fpm)
    factory.engine_class = RunEngine  # it may commit runs of passes
    engine = factory.build(0)
    t0, c0 = time.perf_counter(), time.process_time()
    result = drive(engine, arrivals, runs=runs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, result.end_ms


def run_peer(peer: str, rows: list[dict]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = subprocess.run([sys.executable, peer, str(trace), "--set", f"trace_block_size={TRACE_BLOCK}"],
                             check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-fpm", action="store_true", help="skip forward-pass metrics")
    ap.add_argument("--step", action="store_true",
                    help="step pass by pass (no runs of passes, servesim.fast.runs)")
    ap.add_argument("--peer", help="path of peer_dynamo.py to run the same trace")
    args = ap.parse_args()
    rows = make_rows(args.n, args.rate, args.seed)
    wall, cpu, end_ms = run_servesim(rows, fpm=not args.no_fpm, runs=not args.step)
    # CPU seconds are the steadier figure on a shared machine; both are printed.
    print(f"servesim vllm: {args.n} requests, simulated {end_ms / 1000:.1f} s in {wall:.2f} s wall "
          f"({cpu:.2f} s CPU) -> {args.n / wall:,.0f} requests/s wall, {args.n / cpu:,.0f} per CPU second")
    if args.peer:
        s = run_peer(args.peer, rows)
        print(f"peer ({s.get('peer')} {s.get('version')}): {s['num_requests']} requests, simulated "
              f"{s['sim_duration_s']:.1f} s in {s['wall_clock_s']:.2f} s wall -> "
              f"{s['requests_per_wall_s']:,.0f} requests/s")


if __name__ == "__main__":
    main()
