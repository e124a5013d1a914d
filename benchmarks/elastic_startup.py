#!/usr/bin/env python3
"""How fast must workers start to keep p99 TTFT under 1 s through a 3x burst?

    python benchmarks/elastic_startup.py [--startup 0,2,4,6,8] [--burst-s 60] [--seed 0]

The deployment: vLLM workers (the polynomial timing model with the reference's default
coefficients, 16-token blocks, 4096 KV blocks), a KV-aware router, starting with two workers
(docs/elastic.md shows its table).
The traffic: Poisson arrivals at ``BASE_RPS`` for 60 s, three times that for 60 s (``--burst-s``),
then the base rate again for 60 s; prompts of 256-1536 tokens, 64-256 output tokens (a seeded trace written
to a temporary file). A reactive planner ticks every 5 s and sizes the pool to the traffic of
the last window at ``PER_WORKER_RPS`` requests per second per worker (at least two workers);
removed workers drain (``wait``). For each start-up time the script replays the trace and
prints p99 TTFT over the whole run and over the burst's requests, the GPU-seconds used, and
the requests per GPU-second; two fixed clusters (two and six workers) frame the table.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
from pathlib import Path

import numpy as np
from servesim.config.loader import PlannerSpec, load_config
from servesim.replay.planning import Planner, PlannerDecision
from servesim.replay.runner import simulate

BASE_RPS = 8.0
PER_WORKER_RPS = 4.0
PHASES = ((60.0, 1.0), (60.0, 3.0), (60.0, 1.0))  # (seconds, rate multiple)
INTERVAL_S = 5.0

CONFIG = """
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 4096
cluster: {{workers: {workers}, router: kv}}
workload:
  trace: {{path: {trace}, trace_block_size: 16}}
"""

ELASTIC = """
lifecycle: {{startup_s: {startup}, drain: wait, min_workers: 2, max_workers: 8}}
planner: {{type: static, interval_s: {interval}}}
"""


class TrafficPlanner(Planner):
    """Sizes the pool to the last window's arrival rate at PER_WORKER_RPS per worker."""

    def tick(self, snapshot):  # type: ignore[no-untyped-def]
        window_s = max((snapshot.now_ms - snapshot.since_ms) / 1000.0, 1e-9)
        if snapshot.now_ms == 0.0:
            return None
        rate = snapshot.traffic.requests / window_s
        pool = snapshot.pools[0]
        return PlannerDecision(targets={pool.name: max(2, math.ceil(rate / PER_WORKER_RPS))},
                               reason=f"{rate:.1f} req/s")


def write_trace(path: Path, seed: int, burst_s: float = 60.0) -> tuple[float, float]:
    """The seeded burst trace; returns the burst's span in replay ms (the replay rebases
    timestamps to the first request's)."""
    rng = random.Random(seed)
    t = 0.0
    rows = []
    span = []
    start = 0.0
    for i, (dur, mult) in enumerate(PHASES):
        if i == 1:
            dur = burst_s
        end = start + dur * 1000.0
        if i == 1:
            span.append((start, end))
        while True:
            t += rng.expovariate(BASE_RPS * mult) * 1000.0
            if t >= end:
                t = end
                break
            isl = rng.randrange(256, 1537)
            blocks = -(-isl // 16)
            base = 10_000_000 * (len(rows) + 1)
            rows.append({"timestamp": round(t, 3), "input_length": isl,
                         "output_length": rng.randrange(64, 257),
                         "hash_ids": [base + k for k in range(blocks)]})
        start = end
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = rows[0]["timestamp"]
    return span[0][0] - base, span[0][1] - base


def replay(trace: Path, workers: int, startup: float | None, burst: tuple[float, float]) -> dict:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "sim.yaml"
        text = CONFIG.format(workers=workers, trace=trace)
        if startup is not None:
            text += ELASTIC.format(startup=startup, interval=INTERVAL_S)
        cfg.write_text(text)
        loaded = load_config(str(cfg))
    if startup is not None:
        loaded.planner_spec = PlannerSpec("traffic", TrafficPlanner, None, INTERVAL_S)
    result = simulate(loaded)
    log = result.log
    arrival, first = np.asarray(log.arrival), np.asarray(log.first)
    ok = np.asarray(log.completed_flags()) & (first >= 0)
    in_burst = ok & (arrival >= burst[0]) & (arrival < burst[1])
    ttft = first - arrival
    rep = result.report
    if startup is None:
        gpu_s = workers * float(np.max(np.asarray(log.done))) / 1000.0
    else:
        gpu_s = rep["elastic"]["gpu_seconds"]
    return {"p99_ttft_ms": rep["p99_ttft_ms"], "mean_ttft_ms": rep["mean_ttft_ms"],
            "p99_burst_ttft_ms": float(np.percentile(ttft[in_burst], 99, method="closest_observation")),
            "gpu_seconds": gpu_s, "completed": rep["completed"],
            "added": 0 if startup is None else rep["elastic"]["pools"][0]["workers_added"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--startup", default="0,2,4,6,8", help="start-up times (s), comma-separated")
    ap.add_argument("--burst-s", type=float, default=60.0, help="the burst's length (s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "burst.jsonl"
        burst = write_trace(trace, args.seed, args.burst_s)
        rows = [("fixed 2 workers", replay(trace, 2, None, burst)),
                ("fixed 6 workers", replay(trace, 6, None, burst))]
        for s in [float(x) for x in args.startup.split(",")]:
            rows.append((f"elastic, startup {s:g} s", replay(trace, 2, s, burst)))
    print(f"{'cluster':<26} {'mean TTFT ms':>12} {'p99 TTFT ms':>12} {'p99 burst TTFT ms':>18} "
          f"{'GPU-s':>8} {'added':>6} {'req/GPU-s':>10}")
    for name, r in rows:
        print(f"{name:<26} {r['mean_ttft_ms']:>12.1f} {r['p99_ttft_ms']:>12.1f} "
              f"{r['p99_burst_ttft_ms']:>18.1f} "
              f"{r['gpu_seconds']:>8.1f} {r['added']:>6} {r['completed'] / r['gpu_seconds']:>10.3f}")


if __name__ == "__main__":
    main()
