"""Prefix-hit rate, preemptions and p99 TTFT of every eviction policy on every backend.

    python benchmarks/eviction_table.py [--requests N]

Replays one seeded, prefix-heavy multi-turn workload (``servesim.testing.eviction_kit.
replay_under``: 5 prefix groups sharing 60% of the first turn, two turns per session, one
worker with 160 blocks of 16 tokens) under each installed policy and prints the markdown
table of docs/eviction.md. Deterministic: the same figures on every machine.
"""

from __future__ import annotations

import argparse

from servesim.testing.eviction_kit import replay_under

BACKENDS = ("vllm", "trtllm", "sglang")
POLICIES = ("lru", "lineage", "multi_lru", "lfu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=120)
    args = parser.parse_args()
    print("| backend | policy | prefix-hit rate | preemptions | p99 TTFT (ms) |")
    print("|---|---|---:|---:|---:|")
    for backend in BACKENDS:
        for policy in POLICIES:
            r = replay_under(backend, policy, f"workload.synthetic.num_requests={args.requests}")
            print(f"| {backend} | {policy} | {r['prefix_cache_hit_rate']:.4f} | "
                  f"{r['num_preemptions']} | {r['p99_ttft_ms']:,.1f} |")


if __name__ == "__main__":
    main()
