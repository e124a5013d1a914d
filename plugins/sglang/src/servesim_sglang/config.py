"""The ``engine.sglang:`` section and the per-rank scheduler parameters derived from it.

Names and defaults follow dynamo-mocker.md §5 (table) and aisimulate-engine.md §5.2:
``schedule_policy`` ``fcfs`` (alias ``fifo``), ``max_prefill_tokens`` 16384,
``chunked_prefill_size`` 8192, ``clip_max_new_tokens`` 4096, ``schedule_conservativeness`` 1.0;
``init_new_token_ratio = 0.7 × conservativeness``, ``min = init × 0.14``, decay step
``(init − min) / 600``; LPM falls back to FCFS above 128 waiting requests and uses 32/32 token
in-batch prefix thresholds. ``max_running_requests`` comes from ``engine.max_num_seqs``.

servesim extensions (not reference names): ``retraction_requeue`` (``back`` default, or
``front``), ``retraction_ratio`` (``estimate`` default, or ``reset``) and ``oom_resets_ratio``
(false) choose between the rules of the reference implementation and the older ones of
dynamo-mocker.md §5 (see :mod:`servesim_sglang.scheduler`); the ``lpm_*``/``in_batch_*``
thresholds are SGLang's constants, exposed for experiments.

Attention DP (aisimulate-engine.md §3, §7, §13.2): with ``dp_size > 1`` every rank divides
``chunked_prefill_size`` by ``dp_size`` (an error if it reaches 0) and scales
``schedule_conservativeness`` by 0.3, mirroring SGLang's launch-time DP handling.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

from attrs import field, frozen, validators
from servesim.errors import ConfigError

from servesim_sglang.behaviour import DEFAULT_PROFILE, PROFILES, Behaviour, resolve
from servesim_sglang.behaviour import validate as validate_behaviour
from servesim_sglang.priority_options import PriorityParams, priority_params, validate_priority

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600.0
DP_CONSERVATIVENESS_FACTOR = 0.3
SECTION = "engine.sglang"


@frozen(kw_only=True)
class SglangConfig:
    """``engine.sglang:``; unset ``page_size`` means "the engine block size"."""

    #: Options the report's config echo leaves out at their defaults (added after reports were
    #: first written; servesim.config.loader.echo_section).
    report_omits_defaults: ClassVar[frozenset[str]] = frozenset({
        "scheduler_recv_interval", "schedule_low_priority_values_first",
        "priority_scheduling_preemption_threshold", "disable_priority_preemption", "overlap_read_lag",
        "enable_mixed_chunk"})

    schedule_policy: str = field(default="fcfs", validator=validators.instance_of(str))
    page_size: int | None = None
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0
    lpm_fallback_threshold: int = 128
    in_batch_prefix_check_threshold: int = 32
    in_batch_prefix_deprioritize_threshold: int = 32
    retraction_requeue: str = field(default="back", validator=validators.in_(("back", "front")))
    retraction_ratio: str = field(default="estimate", validator=validators.in_(("estimate", "reset")))
    oom_resets_ratio: bool = False
    # SGLang's --scheduler-recv-interval (servesim_sglang.recv_interval); 1 reads every iteration.
    scheduler_recv_interval: int = 1
    # SGLang-version behaviour (servesim_sglang.behaviour): a profile, and one key per
    # difference; None follows the profile.
    profile: str = "reference"
    two_phase_admission: bool | None = None
    ignore_eos_reserves_full_output: bool | None = None
    admission_page_headroom: bool | None = None
    prefill_budget_after_admit: bool | None = None
    sticky_batch_full: bool | None = None
    lazy_decode_slot: bool | None = None
    cache_decode_at_finish: bool | None = None
    cache_chunk_next_step: bool | None = None
    sglang_retraction: bool | None = None
    evict_whole_leaves: bool | None = None
    conservative_eviction: bool | None = None
    split_refreshes_recency: bool | None = None
    child_per_insert: bool | None = None
    waiting_prefix_touch: bool | None = None
    overlap_schedule: bool | None = None
    prompt_boundary_split: bool | None = None
    overlap_read_lag: bool | None = None
    # SGLang's --enable-priority-scheduling options (engine.scheduling_policy: priority;
    # servesim_sglang.priority), with SGLang's names and defaults.
    schedule_low_priority_values_first: bool = False
    priority_scheduling_preemption_threshold: int = 10
    disable_priority_preemption: bool = False
    # SGLang's --enable-mixed-chunk (servesim_sglang.mixed): a prefill batch carries the
    # running requests' decodes; off with chunked prefill off, as SGLang's is_mixed_chunk.
    enable_mixed_chunk: bool = False


@frozen
class SchedulerParams:
    """One rank's effective scheduler parameters (after attention-DP normalisation)."""

    policy: str
    page_size: int
    max_running_requests: int
    max_prefill_tokens: int
    chunked_prefill_size: int
    clip_max_new_tokens: int
    conservativeness: float
    init_new_token_ratio: float
    min_new_token_ratio: float
    decay_step: float
    total_tokens: int
    lpm_fallback_threshold: int
    check_threshold: int
    deprioritize_threshold: int
    requeue_front: bool = False
    ratio_estimate: bool = True
    oom_resets_ratio: bool = False
    behaviour: Behaviour = PROFILES[DEFAULT_PROFILE]
    # engine.scheduling_policy: priority (servesim_sglang.priority); None without it.
    priority: PriorityParams | None = None
    # SGLang's is_mixed_chunk: enable_mixed_chunk with chunked prefill on.
    mixed_chunk: bool = False

    @property
    def chunking(self) -> bool:
        """False when chunked prefill is off (``chunked_prefill_size <= 0``, SGLang's rule)."""
        return self.chunked_prefill_size > 0


def canonical_policy(name: str) -> str:
    """``fifo`` is SGLang's alias of ``fcfs`` (dynamo-mocker.md §5)."""
    name = name.strip().lower()
    return "fcfs" if name == "fifo" else name


def scheduler_params(config: EngineConfig, sg: SglangConfig, dp_size: int) -> SchedulerParams:
    """Derive a rank's parameters; raises :class:`ConfigError` naming the key path."""
    problems = validate(config, sg)
    if problems:
        path, msg = problems[0]
        raise ConfigError(msg, path=path)
    page = effective_page_size(config, sg)
    chunk = sg.chunked_prefill_size
    conservativeness = sg.schedule_conservativeness
    if dp_size > 1 and chunk > 0:
        chunk //= dp_size
        if chunk == 0:
            raise ConfigError(
                f"{sg.chunked_prefill_size} divided by dp_size {dp_size} is 0 tokens per rank",
                path=f"{SECTION}.chunked_prefill_size",
            )
        conservativeness *= DP_CONSERVATIVENESS_FACTOR
    init = INIT_NEW_TOKEN_RATIO * conservativeness
    minimum = init * MIN_NEW_TOKEN_RATIO_FACTOR
    return SchedulerParams(
        policy=canonical_policy(sg.schedule_policy),
        page_size=page,
        max_running_requests=config.max_num_seqs if config.max_num_seqs is not None else 2**62,
        max_prefill_tokens=sg.max_prefill_tokens,
        chunked_prefill_size=chunk,
        clip_max_new_tokens=sg.clip_max_new_tokens,
        conservativeness=conservativeness,
        init_new_token_ratio=init,
        min_new_token_ratio=minimum,
        decay_step=(init - minimum) / NEW_TOKEN_RATIO_DECAY_STEPS,
        total_tokens=config.num_gpu_blocks * page,
        lpm_fallback_threshold=sg.lpm_fallback_threshold,
        check_threshold=sg.in_batch_prefix_check_threshold,
        deprioritize_threshold=sg.in_batch_prefix_deprioritize_threshold,
        requeue_front=sg.retraction_requeue == "front",
        ratio_estimate=sg.retraction_ratio == "estimate",
        oom_resets_ratio=sg.oom_resets_ratio,
        behaviour=resolve(sg),
        priority=priority_params(config, sg),
        mixed_chunk=sg.enable_mixed_chunk is True and chunk > 0,
    )


def effective_page_size(config: EngineConfig, sg: SglangConfig) -> int:
    """``engine.block_size`` when set, else ``page_size``, else 1 (dynamo-mocker.md §1.1)."""
    if config.block_size is not None:
        return config.block_size
    return sg.page_size if sg.page_size is not None else 1


def validate(config: EngineConfig, sg: SglangConfig) -> list[tuple[str, str]]:
    """Every problem as ``(key_path, message)`` (dynamo-mocker.md §1.5 rules 3 and 7)."""
    out: list[tuple[str, str]] = []
    if config.max_model_len is not None:
        out.append(("engine.max_model_len", "is not supported by the sglang backend (vLLM only)"))
    if not config.enable_chunked_prefill:
        out.append(("engine.enable_chunked_prefill", "must be true for the sglang backend"))
    if config.block_size is not None and config.block_size <= 0:
        out.append(("engine.block_size", f"must be > 0, got {config.block_size}"))
    out.extend(validate_priority(config, sg))
    if sg.page_size is not None and sg.page_size <= 0:
        out.append((f"{SECTION}.page_size", f"must be > 0, got {sg.page_size}"))
    elif sg.page_size is not None and config.block_size is not None and sg.page_size != config.block_size:
        out.append(
            (
                f"{SECTION}.page_size",
                f"{sg.page_size} differs from engine.block_size {config.block_size}; "
                "they must be equal when both are set",
            )
        )
    for name in ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens"):
        value = getattr(sg, name)
        if name == "chunked_prefill_size" and isinstance(value, int) and value <= 0:
            continue  # chunked prefill off, as SGLang's --chunked-prefill-size -1
        if not isinstance(value, int) or value <= 0:
            out.append((f"{SECTION}.{name}", f"must be an integer > 0, got {value!r}"))
    out.extend(validate_behaviour(sg))
    if not isinstance(sg.enable_mixed_chunk, bool):
        out.append((f"{SECTION}.enable_mixed_chunk", f"must be true or false, got {sg.enable_mixed_chunk!r}"))
    elif sg.enable_mixed_chunk and config.aic_nextn:
        out.append((f"{SECTION}.enable_mixed_chunk",
                    "is not modelled with speculative decoding (engine.aic_nextn)"))
    interval = sg.scheduler_recv_interval
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        out.append((f"{SECTION}.scheduler_recv_interval", f"must be an integer >= 1, got {interval!r}"))
    c = sg.schedule_conservativeness
    if not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0:
        out.append((f"{SECTION}.schedule_conservativeness", f"must be finite and >= 0, got {c!r}"))
    page = effective_page_size(config, sg)
    if page > 0 and isinstance(sg.chunked_prefill_size, int) and sg.chunked_prefill_size > 0 \
            and sg.chunked_prefill_size % page:
        out.append(
            (
                f"{SECTION}.chunked_prefill_size",
                f"{sg.chunked_prefill_size} is not a multiple of the page size {page}",
            )
        )
    if config.num_gpu_blocks <= 0:
        out.append(("engine.num_gpu_blocks", f"must be > 0, got {config.num_gpu_blocks}"))
    return out
