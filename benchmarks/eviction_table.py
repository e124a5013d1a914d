"""Prefix-hit rate, preemptions and p99 TTFT of every eviction policy on every backend.

    python benchmarks/eviction_table.py [--requests N] [--plot DIR]

Replays one seeded, prefix-heavy multi-turn workload (``servesim.testing.eviction_kit.
replay_under``: 5 prefix groups sharing 60% of the first turn, two turns per session, one
worker with 160 blocks of 16 tokens) under each installed policy and prints the markdown
table of docs/eviction.md. With ``--plot DIR`` it also replays the workload on TRT-LLM at
several pool sizes (``engine.num_gpu_blocks``), prints that table too, and draws both as
``DIR/eviction-strategies.png`` and ``DIR/eviction-pool-sweep.png`` (the figures of
docs/eviction.md, drawn from the same replays as its tables). Deterministic: the same figures
on every machine, and the same PNG bytes on one matplotlib version.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from servesim.testing.eviction_kit import replay_under

BACKENDS = ("vllm", "trtllm", "sglang")
POLICIES = ("lru", "lineage", "multi_lru", "lfu")
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")
SWEEP_BACKEND = "trtllm"
SWEEP_BLOCKS = (120, 160, 240, 320, 480, 640, 960, 1600)
PANELS = (("prefix_cache_hit_rate", "prefix-hit rate", 1.0), ("num_preemptions", "preemptions", 1.0),
          ("p99_ttft_ms", "p99 TTFT (s)", 1e-3))


def replays(requests: int) -> dict[tuple[str, str], dict[str, Any]]:
    return {(b, p): replay_under(b, p, f"workload.synthetic.num_requests={requests}")
            for b in BACKENDS for p in POLICIES}


def sweep(requests: int) -> dict[tuple[int, str], dict[str, Any]]:
    return {(n, p): replay_under(SWEEP_BACKEND, p, f"workload.synthetic.num_requests={requests}",
                                 f"engine.num_gpu_blocks={n}")
            for n in SWEEP_BLOCKS for p in POLICIES}


def table(reports: dict[tuple[str, str], dict[str, Any]]) -> str:
    lines = ["| backend | policy | prefix-hit rate | preemptions | p99 TTFT (ms) |",
             "|---|---|---:|---:|---:|"]
    for (backend, policy), r in reports.items():
        lines.append(f"| {backend} | {policy} | {r['prefix_cache_hit_rate']:.4f} | "
                     f"{r['num_preemptions']} | {r['p99_ttft_ms']:,.1f} |")
    return "\n".join(lines)


def sweep_table(reports: dict[tuple[int, str], dict[str, Any]]) -> str:
    lines = ["| `num_gpu_blocks` | " + " | ".join(f"`{p}`" for p in POLICIES) + " |",
             "|---:|" + "---:|" * len(POLICIES)]
    for n in SWEEP_BLOCKS:
        lines.append(f"| {n} | " + " | ".join(f"{reports[n, p]['prefix_cache_hit_rate']:.3f}"
                                             for p in POLICIES) + " |")
    return "\n".join(lines)


def _save(fig: Any, path: str) -> None:
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def strategies_figure(reports: dict[tuple[str, str], dict[str, Any]], path: str) -> None:
    """One panel per figure of the table: grouped bars, a group per backend."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.8), dpi=100, layout="constrained")
    width = 0.8 / len(POLICIES)
    for ax, (key, label, scale) in zip(fig.subplots(1, len(PANELS)), PANELS, strict=True):
        for j, (policy, color) in enumerate(zip(POLICIES, COLORS, strict=True)):
            xs = [i + (j - (len(POLICIES) - 1) / 2) * width for i in range(len(BACKENDS))]
            ys = [reports[b, policy][key] * scale for b in BACKENDS]
            ax.bar(xs, ys, width, color=color, label=policy)
        ax.set_xticks(range(len(BACKENDS)), BACKENDS)
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    fig.axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle("Eviction policies on the seeded prefix-heavy workload (160 blocks of 16 tokens)")
    _save(fig, path)


def sweep_figure(reports: dict[tuple[int, str], dict[str, Any]], path: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=100, layout="constrained")
    ax = fig.subplots()
    styles = ("-", "--", "-", "-")  # lineage coincides with lru on a block pool: dashed over it
    for policy, color, style in zip(POLICIES, COLORS, styles, strict=True):
        ys = [reports[n, policy]["prefix_cache_hit_rate"] for n in SWEEP_BLOCKS]
        ax.plot(SWEEP_BLOCKS, ys, style, marker="o", markersize=4, color=color, label=policy)
    ax.set_xscale("log")
    ax.set_xticks(SWEEP_BLOCKS, [str(n) for n in SWEEP_BLOCKS])
    ax.minorticks_off()
    ax.set_xlabel("engine.num_gpu_blocks (16 tokens each)")
    ax.set_ylabel("prefix-hit rate")
    ax.set_title(f"Prefix-hit rate against pool size ({SWEEP_BACKEND})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--plot", metavar="DIR", help="also sweep the pool size and draw both figures")
    args = parser.parse_args()
    reports = replays(args.requests)
    print(table(reports))
    if args.plot:
        swept = sweep(args.requests)
        print()
        print(sweep_table(swept))
        os.makedirs(args.plot, exist_ok=True)
        strategies_figure(reports, os.path.join(args.plot, "eviction-strategies.png"))
        sweep_figure(swept, os.path.join(args.plot, "eviction-pool-sweep.png"))


if __name__ == "__main__":
    main()
