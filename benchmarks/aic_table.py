#!/usr/bin/env python3
"""Print docs/timing.md's table of AIC-predicted TTFT and ITL (markdown).

    python benchmarks/aic_table.py

TTFT is one request's prefill forward (nothing cached); ITL is one decode step of a batch at
a 2048-token context, as the ``aic`` timing model prices them (vLLM, TP 1).
"""

from __future__ import annotations

from servesim.config.engine import EngineConfig
from servesim_aic.config import AicTimingConfig
from servesim_aic.timing import AicTiming

MODELS = ("meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-32B")
SYSTEMS = ("h100_sxm", "h200_sxm")
PROMPTS = (1024, 8192)
BATCHES = (1, 32, 128)
CONTEXT = 2048


def rows() -> list[list[str]]:
    out = []
    for model in MODELS:
        for system in SYSTEMS:
            t = AicTiming(AicTimingConfig(model=model, system=system), EngineConfig(backend="vllm"))
            ttft = [t.predict_prefill_ms(1, isl, 0) for isl in PROMPTS]
            itl = [t.predict_decode_ms(b, b * CONTEXT, CONTEXT, 10**7) for b in BATCHES]
            out.append([f"`{model}`", f"`{system}`", *(f"{v:.1f}" for v in ttft + itl)])
    return out


def table() -> str:
    head = ["model", "system", *(f"TTFT {n // 1024}k (ms)" for n in PROMPTS),
            *(f"ITL b={b} (ms)" for b in BATCHES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
