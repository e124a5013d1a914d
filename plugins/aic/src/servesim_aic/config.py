"""``engine.timing_model: {type: aic, ...}`` options.

Names follow the reference's AIC identity (dynamo-mocker.md §1: ``aic_system`` default
``h200_sxm``, ``aic_backend``, ``aic_backend_version``, ``aic_tp_size``, ``aic_moe_tp_size``,
``aic_moe_ep_size``, ``aic_attention_dp_size`` and the dtype overrides). Unset ``backend``
and ``attention_dp`` take the engine's ``backend`` and ``dp_size``.
"""

from __future__ import annotations

import math
from typing import Any

from attrs import field, frozen, validators

from servesim_aic import catalog

DTYPE_ENUMS = {
    "gemm_dtype": "GEMMQuantMode",
    "moe_dtype": "MoEQuantMode",
    "fmha_dtype": "FMHAQuantMode",
    "kv_cache_dtype": "KVCacheQuantMode",
    "comm_dtype": "CommQuantMode",
}


def _model(_inst: Any, _attr: Any, value: str) -> None:
    if value not in catalog.models():
        raise ValueError(f"model {value!r} is not an AIConfigurator model; expected one of: "
                         f"{catalog.one_of(catalog.models())}")


def _system(_inst: Any, _attr: Any, value: str) -> None:
    if value not in catalog.systems():
        raise ValueError(f"system {value!r} is not an AIConfigurator system; expected one of: "
                         f"{catalog.one_of(catalog.systems())}")


def _positive(_inst: Any, attr: Any, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{attr.name} must be >= 1, got {value}")


def _tp(inst: Any, _attr: Any, value: int) -> None:
    """Tensor parallelism splits the attention heads over the GPUs, so it must divide them
    (vLLM's ``ModelConfig.verify_with_parallel_config``; aiconfigurator-core asserts it while
    compiling, ``sdk/models/base.py``). KV heads are split when there are at least ``tp`` of
    them and replicated otherwise, so either count must divide the other (vLLM's
    ``QKVParallelLinear``)."""
    if value < 1 or inst.model not in catalog.models():
        return  # reported by _positive / _model
    heads, kv_heads = catalog.attention_heads(inst.model)
    valid = [d for d in range(1, (heads or value) + 1) if _splits(d, heads, kv_heads)]
    if heads is not None and heads % value:
        raise ValueError(f"tp {value} does not divide the {heads} attention heads of {inst.model}; "
                         f"expected one of: {', '.join(map(str, valid))}")
    if not _splits(value, heads, kv_heads):
        raise ValueError(f"tp {value} neither divides nor is a multiple of the {kv_heads} KV heads "
                         f"of {inst.model}; expected one of: {', '.join(map(str, valid))}")


def _splits(tp: int, heads: int | None, kv_heads: int | None) -> bool:
    if heads is not None and heads % tp:
        return False
    return kv_heads is None or not (kv_heads % tp if tp <= kv_heads else tp % kv_heads)


def normalize_dtype(value: str | None) -> str | None:
    """The reference's dtype spelling rules (dynamo/_internal/ais.py): empty, ``auto``,
    ``none`` mean the model's own dtype; ``int4`` means weight-only int4."""
    if value is None:
        return None
    value = value.strip()
    if not value or value.lower() in {"auto", "none", "null"}:
        return None
    return "int4_wo" if value == "int4" else value


def _dtype(_inst: Any, attr: Any, value: str | None) -> None:
    name = normalize_dtype(value)
    if name is None:
        return
    from aiconfigurator_core.sdk import common

    allowed = [m.name for m in getattr(common, DTYPE_ENUMS[attr.name])]
    if name not in allowed:
        raise ValueError(f"{attr.name} {value!r} is not supported; expected one of: {catalog.one_of(allowed)}")


def _fraction(_inst: Any, attr: Any, value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ValueError(f"{attr.name} must be in (0, 1], got {value!r}")


_opt_int = [validators.optional(validators.instance_of(int)), _positive]
_opt_str = validators.optional(validators.instance_of(str))


@frozen(kw_only=True)
class AicTimingConfig:
    """One deployment: ``model`` on ``tp`` x ``pp`` GPUs of ``system`` under ``backend``.

    ``gpu_memory_utilization`` is the memory fraction ``engine.num_gpu_blocks: auto`` sizes
    the KV pool from (vLLM's ``gpu_memory_utilization``, SGLang's ``mem_fraction_static``,
    TRT-LLM's ``free_gpu_memory_fraction``). ``cache_dir`` holds compiled engine specs
    (default ``$SERVESIM_AIC_CACHE`` or ``~/.cache/servesim/aic``).
    """

    model: str = field(validator=[validators.instance_of(str), _model])
    system: str = field(default="h200_sxm", validator=[validators.instance_of(str), _system])
    backend: str | None = field(default=None, validator=_opt_str)
    backend_version: str | None = field(default=None, validator=_opt_str)
    tp: int = field(default=1, validator=[validators.instance_of(int), _positive, _tp])
    pp: int = field(default=1, validator=[validators.instance_of(int), _positive])
    attention_dp: int | None = field(default=None, validator=_opt_int)
    moe_tp: int | None = field(default=None, validator=_opt_int)
    moe_ep: int | None = field(default=None, validator=_opt_int)
    gemm_dtype: str | None = field(default=None, validator=[_opt_str, _dtype])
    moe_dtype: str | None = field(default=None, validator=[_opt_str, _dtype])
    fmha_dtype: str | None = field(default=None, validator=[_opt_str, _dtype])
    kv_cache_dtype: str | None = field(default=None, validator=[_opt_str, _dtype])
    comm_dtype: str | None = field(default=None, validator=[_opt_str, _dtype])
    gpu_memory_utilization: float = field(default=0.9, validator=[validators.instance_of(float), _fraction])
    cache_dir: str | None = field(default=None, validator=_opt_str)
