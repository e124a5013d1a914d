"""The numeric keys a run's report holds, known from its configuration before it runs.

``servesim sweep`` checks its objective keys against them before the first point runs.
Nested keys are dotted (``worker_utilization.decode``), as the sweep's table flattens them;
lists (``percentiles``, ``pools``) are not numeric keys.

The keys :func:`~servesim.report.summary.build_report` writes (counts, throughputs, every
latency statistic at the configured percentiles, goodput when an SLA is set) are taken from
that function itself, on an empty request log. The optional sections are listed here
(docs/report.md): the prefill/decode split's handoff keys, speculative decoding's and the
host tier's; tests/sweep/test_report_keys.py pins the lists against real runs. Keys an
installed plugin adds (``servesim_report_extra``) are known only after a run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig

DISAGG_KEYS = (
    "num_cancelled",
    "num_handoffs",
    "mean_kv_transfer_ms",
    "mean_ttft_prefill_ms",
    "mean_ttft_transfer_ms",
    "mean_ttft_decode_ms",
    "worker_utilization.prefill",
    "worker_utilization.decode",
)
SPECULATIVE_KEYS = (
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "spec_decode_mean_acceptance_length",
    "spec_decode_draft_acceptance_rate",
)
HOST_TIER_KEYS = (
    "prefix_cache_hit_rate_g1",
    "prefix_cache_hit_rate_host",
    *(f"host_offload.{k}" for k in ("stores", "stored_blocks", "stored_bytes", "loads",
                                    "loaded_blocks", "loaded_bytes", "cancelled_loads",
                                    "evicted_blocks")),
)

#: servesim.replay.adapters.lora_report's keys (the per-adapter request counts aside).
LORA_KEYS = tuple(f"lora.{k}" for k in ("disk_loads", "gpu_loads", "cpu_evictions",
                                        "gpu_evictions", "load_ms"))
#: servesim.replay.adapters.split_lora_report's per-pool keys (a split's, beside LORA_KEYS).
LORA_SPLIT_KEYS = tuple(f"lora.{role}.{k[len('lora.'):]}" for role in ("prefill", "decode")
                        for k in LORA_KEYS)


def numeric_keys(value: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted keys of ``value`` whose values are numbers (not booleans, not None)."""
    for key, item in value.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(item, Mapping):
            yield from numeric_keys(item, path)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            yield path


def _engines(resolved: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The engine section and every override merged over it (roles, pools)."""
    engine = resolved.get("engine") or {}
    cluster = resolved.get("cluster") or {}
    yield engine
    for role in ("prefill_engine", "decode_engine"):
        yield {**engine, **(cluster.get(role) or {})}
    for pool in cluster.get("pools") or ():
        yield {**engine, **(pool.get("engine") or {})}


def report_keys(loaded: LoadedConfig) -> frozenset[str]:
    """The numeric report keys a run of ``loaded`` writes (before plugins add theirs)."""
    from servesim.report.stats import RequestLog
    from servesim.report.summary import build_report

    sim = loaded.sim
    report = build_report(RequestLog([]), sim.report)
    report.pop("config", None)
    keys = set(numeric_keys(report))
    cluster = sim.cluster
    if cluster.prefill_workers or cluster.decode_workers:
        keys.update(DISAGG_KEYS)
    engines = list(_engines(loaded.resolved()))
    if any(e.get("aic_nextn") is not None for e in engines):
        keys.update(SPECULATIVE_KEYS)
    if any(e.get("native_host_offload") is not None for e in engines):
        keys.update(HOST_TIER_KEYS)
    if any(e.get("enable_lora") for e in engines):
        keys.update(LORA_KEYS)
        if cluster.prefill_workers or cluster.decode_workers:
            keys.update(LORA_SPLIT_KEYS)
    return frozenset(keys)


__all__ = ["DISAGG_KEYS", "HOST_TIER_KEYS", "LORA_KEYS", "LORA_SPLIT_KEYS", "SPECULATIVE_KEYS",
           "numeric_keys", "report_keys"]
