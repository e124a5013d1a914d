"""``workload.warm_cache``: start a replay with the KV cache a captured KV-event stream left
(servesim.kv.warm_start, docs/workloads.md "Warm start from a captured cache")."""

from __future__ import annotations

from typing import Any

from attrs import frozen

from servesim.config.converter import Problem, show


@frozen(kw_only=True)
class WarmCacheConfig:
    """``path`` of the capture, its ``format`` (``servesim_jsonl`` or ``vllm_msgpack``) and
    ``worker``: for ``servesim_jsonl`` only that worker's lines are loaded (default: every
    line, into the worker it names); a ``vllm_msgpack`` capture fills that worker (default 0)."""

    path: str
    format: str = "servesim_jsonl"
    worker: int | None = None


def check_warm_cache(warm: WarmCacheConfig | None) -> list[Problem]:
    """Range problems of ``workload.warm_cache``."""
    from servesim.kv.warm_start import FORMATS

    if warm is None:
        return []
    out: list[Problem] = []
    if not isinstance(warm.path, str) or not warm.path:
        out.append(("workload.warm_cache.path", f"expected a file path, got {show(warm.path)}"))
    if warm.format not in FORMATS:
        out.append(("workload.warm_cache.format",
                    f"expected one of {', '.join(FORMATS)}, got {show(warm.format)}"))
    w: Any = warm.worker
    if w is not None and not (isinstance(w, int) and not isinstance(w, bool) and w >= 0):
        out.append(("workload.warm_cache.worker", f"expected an integer >= 0 or null, got {show(w)}"))
    return out


__all__ = ["WarmCacheConfig", "check_warm_cache"]
