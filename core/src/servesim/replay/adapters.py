"""The report's ``lora`` section, added when a rank has LoRA on (servesim.mechanics.lora).

Totals over every rank: adapters read from disk into host memory (``disk_loads``), copied into
a GPU slot (``gpu_loads``), evicted from the host cache and from GPU slots, the milliseconds
loading took, and the requests each adapter served (``requests``, by adapter id as a string;
``"0"`` is the base model), counted at their first admission.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from servesim.rank import LoraAdapters


def lora_report(engines: Iterable[Any]) -> dict[str, Any]:
    caches = [r.lora_cache for e in engines for r in e.ranks
              if isinstance(r, LoraAdapters) and r.lora_cache is not None]
    if not caches:
        return {}
    totals: dict[str, Any] = {"disk_loads": 0, "gpu_loads": 0, "cpu_evictions": 0,
                              "gpu_evictions": 0, "load_ms": 0.0}
    requests: dict[int, int] = {}
    for cache in caches:
        st = cache.stats
        totals["disk_loads"] += st.disk_loads
        totals["gpu_loads"] += st.gpu_loads
        totals["cpu_evictions"] += st.cpu_evictions
        totals["gpu_evictions"] += st.gpu_evictions
        totals["load_ms"] += st.load_ms
        for lora, n in st.requests.items():
            requests[lora] = requests.get(lora, 0) + n
    totals["requests"] = {str(k): requests[k] for k in sorted(requests)}
    return {"lora": totals}


__all__ = ["lora_report"]
