"""The ``engine:`` section: the reference's engine-argument names and defaults.

Field names and defaults follow dynamo-mocker.md §1 (``MockEngineArgs``) and
aisimulate-engine.md §5.5 (``EngineConfig``). ``block_size`` None means the backend's native
default (vLLM 64, SGLang 1, TRT-LLM 32), resolved by :func:`resolve_block_size` before any
rank is built, so ranks always see an int. The backend's own section (``engine.vllm:`` ...)
is structured by the selected backend's ``config_class`` and handed to the rank separately.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs
from attrs import field, frozen

from servesim.contract import TransferTimingMode, WorkerType
from servesim.kv.host_tier import NativeHostOffloadConfig
from servesim.mechanics.lora import LoraLoading, LoraModule


class PreemptionMode(enum.Enum):
    LIFO = "lifo"
    FIFO = "fifo"


class SchedulingPolicy(enum.Enum):
    """Waiting-queue order (vLLM ``--scheduling-policy``): arrival, or (priority, arrival)."""

    FCFS = "fcfs"
    PRIORITY = "priority"


def _default_timing() -> dict[str, Any]:
    return {"type": "polynomial"}


@frozen(kw_only=True)
class EngineConfig:
    """One worker's engine arguments (every rank of the worker gets the same)."""

    #: Options the report's config echo leaves out at their defaults (added after reports were
    #: first written; servesim.config.loader.echo_section).
    report_omits_defaults: ClassVar[frozenset[str]] = frozenset({"scheduling_policy"})

    backend: str = "vllm"
    num_gpu_blocks: int = 16384
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = 256
    max_num_batched_tokens: int | None = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    dp_size: int = 1
    preemption_mode: PreemptionMode = PreemptionMode.LIFO
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS
    worker_type: WorkerType = WorkerType.AGGREGATED
    prefill_schedule_interval: int = 1
    kv_bytes_per_token: float | None = None
    kv_transfer_bandwidth: float | None = None
    kv_transfer_timing_mode: TransferTimingMode = TransferTimingMode.FULL_PROMPT
    # Model geometry for kv_bytes_per_token when it is unset: num_layers * 2 * num_kv_heads
    # * head_dim * kv_dtype_bytes (dynamo-mocker.md §1.3; servesim.mechanics.handoff.kv_bytes_per_token).
    num_layers: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    kv_dtype_bytes: float = 2.0
    emit_kv_token_ids: bool = False
    aic_nextn: int | None = None
    aic_nextn_accept_rates: str | None = None
    aic_mtp_seed: int = 42
    # Host KV tier G2 (servesim.kv.host_tier; vllm only): null disables it.
    native_host_offload: NativeHostOffloadConfig | None = None
    # A name, or {type: NAME, ...options} structured into the policy's config_class.
    eviction_policy: str | dict[str, Any] = "lru"
    timing_model: dict[str, Any] = field(factory=_default_timing)
    # LoRA adapters (servesim.mechanics.lora; docs/lora.md), with vLLM's engine-argument names.
    enable_lora: bool = False
    max_loras: int = 1
    max_cpu_loras: int | None = None  # None: max_loras, as vLLM
    max_lora_rank: int = 16
    lora_modules: tuple[LoraModule, ...] = ()
    lora_loading: LoraLoading = field(factory=LoraLoading)

    @property
    def bs(self) -> int:
        """The resolved block size (raises if :func:`resolve_block_size` was not applied)."""
        if self.block_size is None:
            raise ValueError("engine.block_size was not resolved to the backend default")
        return self.block_size

    @property
    def decode_speedup(self) -> float:
        return self.speedup_ratio * self.decode_speedup_ratio


def resolve_block_size(config: EngineConfig, backend_default: int) -> EngineConfig:
    if config.block_size is not None:
        return config
    return attrs.evolve(config, block_size=backend_default)
