"""Contrast the trtllm backend's three capacity policies on one workload.

    python benchmarks/trtllm_policies.py [--out docs/trtllm-policies.png]

Replays the same deterministic workload through one ``trtllm`` engine per policy
(``guaranteed_no_evict``, ``max_utilization``, ``static_batch``) with the reference's
polynomial timing, prints a Markdown summary table and draws running requests over
simulated time (pauses marked) into a PNG. matplotlib is imported only here, so it is not a
test dependency; tests never import this script.
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path
from typing import Any

from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.factory import EngineFactory
from servesim.testing.driver import DriveResult, drive
from servesim.timing.builtin import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank

POLICIES = list(CapacitySchedulerPolicy)
ENGINE: dict[str, Any] = {"num_gpu_blocks": 256, "max_num_seqs": 16, "max_num_batched_tokens": 2048}
TRACE_BLOCK = 64


def workload(seed: int = 7, n: int = 40) -> list[tuple[float, Request]]:
    """Poisson arrivals at ~25 req/s; 200-900-token prompts (half share a 256-token system
    prompt); 50-400 output tokens. Sized so that reserving every request's full output
    (GNE) leaves blocks idle that MAX_UTILIZATION can use."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    next_id = 10_000
    for i in range(n):
        t += rng.expovariate(25.0) * 1000.0
        blocks = rng.randint(200, 900) // TRACE_BLOCK + 1
        ids = [0, 1, 2, 3] if rng.random() < 0.5 else []
        while len(ids) < blocks:
            ids.append(next_id)
            next_id += 1
        prompt = RepeatedBlockTokens(ids, TRACE_BLOCK)
        out.append((round(t, 3), Request(i, prompt, rng.randint(50, 400))))
    return out


def run(policy: CapacitySchedulerPolicy) -> DriveResult:
    factory = EngineFactory(
        EngineConfig(backend="trtllm", **ENGINE),
        TrtllmRank,
        PolynomialTiming(),
        backend_config=TrtllmConfig(capacity_scheduler_policy=policy),
    )
    return drive(factory.build(0), workload())


def series(result: DriveResult) -> tuple[list[float], list[int], list[float]]:
    """Running requests after each pass boundary, and the times of pauses."""
    times = [0.0]
    running = [0]
    for done in result.completions:
        times.append(done.end_ms)
        metrics = done.by_rank[0].effects.metrics
        running.append(metrics.running_requests if metrics is not None else 0)
    pauses = [p.started_at_ms for p in result.passes for _ in p.by_rank[0].effects.pressure_events]
    return times, running, pauses


def summary(policy: CapacitySchedulerPolicy, result: DriveResult) -> dict[str, Any]:
    reqs = list(result.requests.values())
    ttft = [r.ttft_ms for r in reqs if r.ttft_ms is not None]
    e2e = [r.completed_ms - r.arrival_ms for r in reqs if r.completed_ms is not None]
    _, running, pauses = series(result)
    return {
        "policy": policy.value,
        "mean TTFT (ms)": statistics.fmean(ttft),
        "p90 TTFT (ms)": sorted(ttft)[round((len(ttft) - 1) * 0.9)],
        "mean E2E (ms)": statistics.fmean(e2e),
        "makespan (ms)": result.end_ms,
        "peak running": max(running),
        "pauses": len(pauses),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [f"{v:.0f}" if isinstance(v, float) else str(v) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[CapacitySchedulerPolicy, DriveResult], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 7), sharex=True, sharey=True)
    for ax, (policy, result) in zip(axes, results.items(), strict=True):
        times, running, pauses = series(result)
        ax.step([t / 1000 for t in times], running, where="post", lw=1.2)
        if pauses:
            ax.plot(
                [t / 1000 for t in pauses],
                [0.5] * len(pauses),
                "v",
                color="C3",
                ms=5,
                label=f"pause ({len(pauses)})",
            )
            ax.legend(loc="upper right", fontsize=8)
        ax.set_title(policy.value, fontsize=10, loc="left")
        ax.set_ylabel("running")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle("trtllm backend: running requests per capacity policy (same workload)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/trtllm-policies.png"))
    args = parser.parse_args()
    results = {p: run(p) for p in POLICIES}
    print(markdown([summary(p, r) for p, r in results.items()]))
    plot(results, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
