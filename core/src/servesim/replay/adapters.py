"""The report's ``lora`` section, added when a rank has LoRA on (servesim.mechanics.lora).

Totals over every rank: adapters read from disk into host memory (``disk_loads``), copied into
a GPU slot (``gpu_loads``), evicted from the host cache and from GPU slots, the milliseconds
loading took, and the requests each adapter served (``requests``, by adapter id as a string;
``"0"`` is the base model), counted at their first admission.

A prefill/decode split (:func:`split_lora_report`) has the same keys, totalled over both
pools, with ``requests`` counted once per request (on the prefill workers, where each request
is admitted first; on the decode workers when only they have LoRA on), plus ``prefill`` and
``decode``: each pool's own loads, evictions and load time (each worker loads the adapters of
the requests it runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from servesim.mechanics.lora import AdapterCache
from servesim.rank import LoraAdapters

_COUNTS = ("disk_loads", "gpu_loads", "cpu_evictions", "gpu_evictions")


def _caches(engines: Iterable[Any]) -> list[AdapterCache]:
    return [r.lora_cache for e in engines for r in e.ranks
            if isinstance(r, LoraAdapters) and r.lora_cache is not None]


def _totals(caches: Iterable[AdapterCache]) -> dict[str, Any]:
    totals: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
    totals["load_ms"] = 0.0
    for cache in caches:
        st = cache.stats
        totals["disk_loads"] += st.disk_loads
        totals["gpu_loads"] += st.gpu_loads
        totals["cpu_evictions"] += st.cpu_evictions
        totals["gpu_evictions"] += st.gpu_evictions
        totals["load_ms"] += st.load_ms
    return totals


def _requests(caches: Iterable[AdapterCache]) -> dict[str, int]:
    requests: dict[int, int] = {}
    for cache in caches:
        for lora, n in cache.stats.requests.items():
            requests[lora] = requests.get(lora, 0) + n
    return {str(k): requests[k] for k in sorted(requests)}


def lora_report(engines: Iterable[Any]) -> dict[str, Any]:
    caches = _caches(engines)
    if not caches:
        return {}
    totals = _totals(caches)
    totals["requests"] = _requests(caches)
    return {"lora": totals}


def split_lora_report(engines: Sequence[Any], is_prefill: Sequence[bool]) -> dict[str, Any]:
    """The ``lora`` section of a split whose engine ``w`` is a prefill worker when
    ``is_prefill[w]`` (module docstring); empty when no rank of either pool has LoRA on."""
    prefill = _caches([e for e, pf in zip(engines, is_prefill, strict=True) if pf])
    decode = _caches([e for e, pf in zip(engines, is_prefill, strict=True) if not pf])
    if not prefill and not decode:
        return {}
    totals = _totals([*prefill, *decode])
    totals["requests"] = _requests(prefill or decode)
    totals["prefill"] = _totals(prefill)
    totals["decode"] = _totals(decode)
    return {"lora": totals}


__all__ = ["lora_report", "split_lora_report"]
