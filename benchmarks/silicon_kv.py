"""KV transfer between a disagg row's prefill and decode workers, on the system's links.

Each GPU of the prefill worker holds its share of a request's KV cache and sends it over its
own link to the decode worker, so one request's handoff takes
``prompt tokens x KV bytes per token per GPU / link bandwidth per GPU``:

* the KV bytes per token per GPU are AIConfigurator's for the prefill role's deployment
  (``aiconfigurator_core.sdk.memory.KVCacheEstimator``, ``kv_size_per_token_bytes``: the
  model's KV geometry after the TP split, in the KV cache's precision);
* the link is the system's ``node.inter_node_bw`` (``aiconfigurator_core/systems/<system>.yaml``,
  bytes/s per GPU and direction: 50 GB/s for H100/H200's 400 Gb/s NICs, 100 GB/s for
  B200/B300's 800 Gb/s, 900 GB/s NVLink within a GB200/GB300 rack).

servesim's core prices the handoff from these two (``engine.kv_bytes_per_token``,
``engine.kv_transfer_bandwidth``, docs/configuration.md).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


@cache
def link_gb_s(system: str) -> float | None:
    """The system's per-GPU inter-node bandwidth in GB/s, or None."""
    import aiconfigurator_core
    import yaml

    path = Path(aiconfigurator_core.__file__).parent / "systems" / f"{system}.yaml"
    try:
        spec = yaml.safe_load(path.read_text())
        return float(spec["node"]["inter_node_bw"]) / 1e9
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return None


def kv_bytes_per_token(row: Any, role: Any, kv_fp8: bool) -> float | None:
    """AIConfigurator's KV bytes per token on one GPU of ``role``, or None."""
    from aiconfigurator_core.sdk.memory import KVCacheEstimator
    from servesim_aic import catalog
    from servesim_aic.deployment import quiet

    try:
        with quiet():
            est = KVCacheEstimator.from_request(
                row.model, row.system, row.backend, catalog.resolve_version(row.system, row.backend, None),
                max_num_tokens=8192, max_batch_size=max(1, role.max_num_seqs or row.concurrency),
                tp_size=role.tp, pp_size=role.pp, attention_dp_size=role.attention_dp,
                moe_tp_size=role.moe_tp, moe_ep_size=role.moe_ep, gemm_quant_mode=row.gemm,
                moe_quant_mode=row.moe, kvcache_quant_mode="fp8" if kv_fp8 else None)
        value = float(est.breakdown["kv_size_per_token_bytes"])
    except Exception:  # noqa: BLE001 - AIConfigurator raises many kinds; the row then keeps core's default
        return None
    return value if value > 0 else None


def transfer_options(row: Any, kv_fp8: bool) -> dict[str, float]:
    """``engine`` keys pricing the row's KV handoff, or {} where either number is unknown."""
    bw = link_gb_s(row.system)
    per_token = kv_bytes_per_token(row, row.roles["prefill"], kv_fp8)
    if bw is None or per_token is None:
        return {}
    return {"kv_bytes_per_token": per_token, "kv_transfer_bandwidth": bw}
