"""The ``engine.trtllm:`` section and the per-rank limits derived from it.

``capacity_scheduler_policy`` takes TensorRT-LLM's policy names (``CapacitySchedulerPolicy``
in ``tensorrt_llm/llmapi/llm_args.py``): ``guaranteed_no_evict`` (TensorRT-LLM's default and
the only one the reference models, dynamo-mocker.md §6 and aisimulate-engine.md §5.3),
``max_utilization`` and ``static_batch``. ``max_batch_size`` and ``max_num_tokens`` are
TensorRT-LLM's names for the per-step request and token limits; when unset they fall back to
``engine.max_num_seqs`` and ``engine.max_num_batched_tokens`` so a config written for the
reference keeps its meaning. Chunked context is ``engine.enable_chunked_prefill``.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, ClassVar

from attrs import frozen

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig

SECTION = "engine.trtllm"


class CapacitySchedulerPolicy(enum.Enum):
    GUARANTEED_NO_EVICT = "guaranteed_no_evict"
    MAX_UTILIZATION = "max_utilization"
    STATIC_BATCH = "static_batch"


class ContextChunkingPolicy(enum.Enum):
    """How the micro-batch scheduler splits the token budget between context requests
    (``ContextChunkingPolicy`` in TensorRT-LLM's ``microBatchScheduler.cpp``)."""

    FIRST_COME_FIRST_SERVED = "first_come_first_served"
    EQUAL_PROGRESS = "equal_progress"


@frozen(kw_only=True)
class TrtllmConfig:
    """``engine.trtllm:``.

    ``first_token_decode_call``: when true, a request whose context finishes in a step is
    priced in that step's decode call too (the first token costs prefill + decode,
    aisimulate-engine.md §6.4 "TRT-LLM ... still make a separate decode call"). The
    installed reference (Dynamo 1.6.1, ``engine_type: trtllm``) emits the first token at the
    end of the context forward without a decode call, exactly like its vLLM path, and so
    does TensorRT-LLM itself (the context phase samples the first token); the default
    follows that so the golden tests match the reference.

    ``context_chunking_policy`` only affects ``max_utilization`` and ``static_batch``:
    ``guaranteed_no_evict`` reproduces the reference's token budget exactly (running
    requests first, then admissions, each taking what is left).

    ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio``: TensorRT-LLM's batch
    waiting (``PyExecutor._waiting_requests``), off by default as in TensorRT-LLM
    (:mod:`servesim_trtllm.batch_wait`).

    ``disable_overlap_scheduler``: TensorRT-LLM's option of that name. False runs the
    overlap scheduler, which chooses the next step while the current one runs, so a new
    request joins one step later (:mod:`servesim.mechanics.overlap_inbox`). TensorRT-LLM's
    own default is false; servesim's is true, the reference's loop (dynamo-mocker.md §6
    steps without overlap), so that configs written for the reference keep their results.
    """

    #: Options the report's config echo leaves out at their defaults (added after reports were
    #: first written; servesim.config.loader.echo_section).
    report_omits_defaults: ClassVar[frozenset[str]] = frozenset({
        "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio", "disable_overlap_scheduler"})

    capacity_scheduler_policy: CapacitySchedulerPolicy = CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
    max_batch_size: int | None = None
    max_num_tokens: int | None = None
    context_chunking_policy: ContextChunkingPolicy = ContextChunkingPolicy.FIRST_COME_FIRST_SERVED
    first_token_decode_call: bool = False
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    disable_overlap_scheduler: bool = True


@frozen
class Limits:
    """One rank's effective limits (``None`` means unbounded)."""

    max_batch_size: int | None
    max_num_tokens: int | None
    chunked_context: bool


def effective_limits(config: EngineConfig, trt: TrtllmConfig) -> Limits:
    batch = trt.max_batch_size if trt.max_batch_size is not None else config.max_num_seqs
    tokens = trt.max_num_tokens if trt.max_num_tokens is not None else config.max_num_batched_tokens
    return Limits(batch, tokens, config.enable_chunked_prefill)


def validate(config: EngineConfig, trt: TrtllmConfig) -> list[tuple[str, str]]:
    """``(key_path, message)`` problems, checked before any rank is built."""
    problems: list[tuple[str, str]] = []
    for name in ("max_batch_size", "max_num_tokens"):
        value = getattr(trt, name)
        if value is not None and value < 1:
            problems.append((f"{SECTION}.{name}", f"must be >= 1 or unset, got {value}"))
    iters = trt.batch_wait_timeout_iters
    if iters < 0:
        problems.append((f"{SECTION}.batch_wait_timeout_iters", f"must be >= 0, got {iters}"))
    ratio = trt.batch_wait_max_tokens_ratio
    if not 0.0 <= ratio <= 1.0:
        problems.append((f"{SECTION}.batch_wait_max_tokens_ratio", f"must be in [0, 1], got {ratio}"))
    if config.num_gpu_blocks < 1:
        problems.append(("engine.num_gpu_blocks", f"must be >= 1, got {config.num_gpu_blocks}"))
    if config.block_size is not None and config.block_size < 1:
        problems.append(("engine.block_size", f"must be >= 1, got {config.block_size}"))
    gne = trt.capacity_scheduler_policy is CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
    if config.aic_nextn is not None and not gne:
        problems.append(("engine.aic_nextn", "speculative decoding is modelled with "
                         "capacity_scheduler_policy guaranteed_no_evict only"))
    if config.scheduling_policy.value != "fcfs":
        # docs/workloads.md "Priorities": TRT-LLM's capacity scheduler ignores request priority.
        problems.append(("engine.scheduling_policy", "priority is modelled for the vllm backend only"))
    return problems
