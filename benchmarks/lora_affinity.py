"""p99 TTFT and adapter loads of 64 LoRA adapters on 4 vLLM workers (the table of docs/lora.md).

    python benchmarks/lora_affinity.py [--requests N] [--rate R]

One seeded synthetic workload (every session served by one of 64 adapters, Zipf popularity
with exponent 1, rank 16, 84 MB each) replayed on four KV-routed vLLM workers with GPU slots
``max_loras`` 4 or 16 (host cache of 64 adapters) and the router's ``adapter_affinity`` off or
on. Deterministic: the same figures on every machine.
"""

from __future__ import annotations

import argparse
from typing import Any

from servesim.config.loader import load_config
from servesim.replay.runner import simulate

SLOTS = (4, 16)
AFFINITY = (0.0, 64.0, 256.0)


def replay(slots: int, affinity: float, requests: int, rate: float) -> dict[str, Any]:
    sets = [
        "engine.backend=vllm", "engine.num_gpu_blocks=8192", "engine.block_size=16",
        "engine.enable_lora=true", f"engine.max_loras={slots}", "engine.max_cpu_loras=64",
        "cluster.workers=4", "cluster.router=kv",
        f"cluster.router_config={{adapter_affinity: {affinity}, adapter_slots: {slots}}}",
        "workload.seed=7", f"workload.synthetic.num_requests={requests}",
        f"workload.synthetic.rate={rate}", "workload.synthetic.input_length=uniform:256:2048",
        "workload.synthetic.output_length=uniform:32:256", "workload.synthetic.prefix_groups=0",
        "workload.synthetic.lora_adapters=64", "workload.synthetic.lora_popularity=zipf:1.0",
    ]
    return simulate(load_config(None, sets)).report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rate", type=float, default=24.0)
    a = p.parse_args(argv)
    print("| max_loras | adapter affinity | p99 TTFT (ms) | mean TTFT (ms) | GPU loads | disk loads "
          "| load time (s) | completed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for slots in SLOTS:
        for affinity in AFFINITY:
            r = replay(slots, affinity, a.requests, a.rate)
            lora = r["lora"]
            print(f"| {slots} | {affinity:g} | {r['p99_ttft_ms']:.0f} | {r['mean_ttft_ms']:.0f} "
                  f"| {lora['gpu_loads']} | {lora['disk_loads']} | {lora['load_ms'] / 1000:.1f} "
                  f"| {r['completed']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
