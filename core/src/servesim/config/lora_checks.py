"""Range checks of the LoRA engine keys (servesim.mechanics.lora), each naming its key path.

The rules are vLLM 0.32's (vllm/config/lora.py): ``max_loras >= 1``, ``max_cpu_loras`` at
least ``max_loras``, ``max_lora_rank`` one of the ranks vLLM allows; every adapter's rank at
most ``max_lora_rank`` (vLLM refuses to load a larger one).
"""

from __future__ import annotations

import math
from typing import Any

from servesim.config.converter import Problem, show
from servesim.mechanics.lora import LORA_RANKS


def check_lora(engine: Any, prefix: str) -> list[Problem]:
    if not hasattr(engine, "enable_lora"):
        return []
    out: list[Problem] = []
    slots = engine.max_loras
    if not (isinstance(slots, int) and slots >= 1):
        out.append((f"{prefix}.max_loras", f"expected an integer >= 1, got {show(slots)}"))
        slots = 1
    cpu = engine.max_cpu_loras
    if cpu is not None and not (isinstance(cpu, int) and cpu >= slots):
        out.append((f"{prefix}.max_cpu_loras",
                    f"expected null or an integer >= max_loras ({slots}), got {show(cpu)}"))
    rank = engine.max_lora_rank
    if rank not in LORA_RANKS:
        out.append((f"{prefix}.max_lora_rank",
                    f"expected one of {', '.join(map(str, LORA_RANKS))}, got {show(rank)}"))
        rank = max(LORA_RANKS)
    ids: set[int] = set()
    names: set[str] = set()
    for i, m in enumerate(engine.lora_modules):
        at = f"{prefix}.lora_modules[{i}]"
        if not (isinstance(m.id, int) and m.id >= 1):
            out.append((f"{at}.id", f"expected an integer >= 1, got {show(m.id)}"))
        elif m.id in ids:
            out.append((f"{at}.id", f"adapter id {m.id} is listed twice"))
        ids.add(m.id)
        if m.name is not None:
            if not m.name or m.name in names:
                out.append((f"{at}.name", f"expected a distinct non-empty name, got {show(m.name)}"))
            names.add(m.name)
        if m.rank is not None and not (isinstance(m.rank, int) and 1 <= m.rank <= rank):
            out.append((f"{at}.rank", f"expected an integer in [1, max_lora_rank ({rank})], "
                                      f"got {show(m.rank)}"))
        if m.size_bytes is not None and not (isinstance(m.size_bytes, int) and m.size_bytes >= 0):
            out.append((f"{at}.size_bytes", f"expected an integer >= 0, got {show(m.size_bytes)}"))
    loading = engine.lora_loading
    if not (isinstance(loading.bytes_per_rank, int) and loading.bytes_per_rank >= 0):
        out.append((f"{prefix}.lora_loading.bytes_per_rank",
                    f"expected an integer >= 0, got {show(loading.bytes_per_rank)}"))
    for name in ("disk_bandwidth", "cpu_bandwidth"):
        v = getattr(loading, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            out.append((f"{prefix}.lora_loading.{name}",
                        f"expected a finite number >= 0 (GB/s; 0: instantaneous), got {show(v)}"))
    return out


__all__ = ["check_lora"]
