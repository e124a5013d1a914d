"""The neutral command/effect contract between a driver and scheduler ranks.

These frozen attrs types are the only things that cross the core/plugin boundary
(docs/architecture.md). Field names and semantics follow ``reference/aisimulate-engine.md`` §4
("Protocol types"); where a name is made Pythonic the docstring says so.

Speed note (docs/architecture.md, "Speed by design"): a pass's outputs are carried columnar in :class:`OutputBatch`
(one list entry per emitted token) instead of one object per token; :meth:`OutputBatch.outputs`
builds the rich :class:`Output` objects only when a consumer asks for them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from attrs import field, frozen

if TYPE_CHECKING:
    from servesim.tokens import TokenSeq

RequestId = int
"""Caller-allocated request identity (the reference uses a UUID; servesim uses ints)."""


@frozen(slots=True)
class HandoffId:
    """Caller-allocated identity of one prefill→decode handoff (aisimulate-engine.md §8.1)."""

    value: int


# --------------------------------------------------------------------------- requests


@frozen(slots=True)
class Request:
    """One request as submitted to a rank (aisimulate-engine.md §4.1).

    ``prompt`` is a :class:`servesim.tokens.TokenSeq`, which may be lazy (e.g. built from
    Mooncake hash ids) so that replaying 100k requests does not materialise 100k token lists.
    ``output_token_ids``, when given, fixes the exact outputs and its length overrides
    ``max_output_tokens`` (reference §4.1).

    ``priority`` orders requests under a priority scheduling policy: lower is served first, ties
    by arrival (vLLM ``Request.priority``, ``--scheduling-policy priority``); a backend without
    such a policy ignores it. ``lora`` is the LoRA adapter id, as vLLM's
    ``LoRARequest.lora_int_id`` (>= 1); 0 is the base model.
    """

    request_id: RequestId
    prompt: TokenSeq
    max_output_tokens: int
    output_token_ids: tuple[int, ...] | None = None
    priority: int = 0
    lora: int = 0

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    @property
    def planned_output_tokens(self) -> int:
        if self.output_token_ids is not None:
            return len(self.output_token_ids)
        return self.max_output_tokens


# --------------------------------------------------------------------------- commands


@frozen(slots=True)
class Submit:
    """An ordinary request."""

    request: Request


@frozen(slots=True)
class SubmitHandoffPrefill:
    """A prefill-worker request whose completed prefill KV stays source-held."""

    handoff_id: HandoffId
    request: Request


@frozen(slots=True)
class ReserveDestination:
    """A decode worker accepts the request and reserves its destination KV (may be deferred FIFO)."""

    handoff_id: HandoffId
    request: Request


@frozen(slots=True)
class ActivateDestination:
    """After the transfer completes, make the reserved destination runnable."""

    handoff_id: HandoffId


@frozen(slots=True)
class ReleaseSource:
    """Free a source hold after a successful transfer."""

    handoff_id: HandoffId


@frozen(slots=True)
class CancelSource:
    """Cancel a pending or held source."""

    handoff_id: HandoffId


@frozen(slots=True)
class CancelDestination:
    """Cancel a pending, reserved or active destination."""

    handoff_id: HandoffId


@frozen(slots=True)
class CancelRequest:
    """Cancel a request; ``discard_pending_output`` asks for suppression even on a no-op."""

    request_id: RequestId
    discard_pending_output: bool = False


Command = (
    Submit
    | SubmitHandoffPrefill
    | ReserveDestination
    | ActivateDestination
    | ReleaseSource
    | CancelSource
    | CancelDestination
    | CancelRequest
)
COMMAND_TYPES: tuple[type, ...] = (
    Submit,
    SubmitHandoffPrefill,
    ReserveDestination,
    ActivateDestination,
    ReleaseSource,
    CancelSource,
    CancelDestination,
    CancelRequest,
)


class ResultKind(enum.Enum):
    SUBMITTED = "submitted"
    DESTINATION_ACCEPTED = "destination_accepted"
    APPLIED = "applied"
    NOOP = "noop"


@frozen(slots=True)
class CommandResult:
    """``Submitted(id)``, ``DestinationAccepted{id}``, ``Applied`` or ``Noop`` (reference §4.2)."""

    kind: ResultKind
    request_id: RequestId | None = None

    @classmethod
    def submitted(cls, request_id: RequestId) -> CommandResult:
        return cls(ResultKind.SUBMITTED, request_id)

    @classmethod
    def destination_accepted(cls, request_id: RequestId) -> CommandResult:
        return cls(ResultKind.DESTINATION_ACCEPTED, request_id)


APPLIED = CommandResult(ResultKind.APPLIED)
NOOP = CommandResult(ResultKind.NOOP)


# --------------------------------------------------------------------------- KV events


@frozen(slots=True)
class KvBlock:
    """One stored block: sequence-aware ``block_hash`` and token-only ``tokens_hash`` (§4.6)."""

    block_hash: int
    tokens_hash: int
    token_ids: tuple[int, ...] | None = None


@frozen(slots=True)
class StoredBlocks:
    """A batch of newly cached blocks, in sequence order, after ``parent_hash``."""

    parent_hash: int | None
    blocks: tuple[KvBlock, ...]
    start_position: int | None = None
    #: Storage tier: None for device KV (G1); ``"CPU"`` for the host tier (servesim.kv.host_tier).
    medium: str | None = None
    #: The LoRA adapter of the request that stored the blocks (vLLM's ``BlockStored.lora_id``
    #: and ``lora_name``: its id and served name); None for the base model.
    lora_id: int | None = None
    lora_name: str | None = None


@frozen(slots=True)
class RemovedBlocks:
    """The final physical copies of these block hashes were evicted."""

    block_hashes: tuple[int, ...]
    medium: str | None = None  # as StoredBlocks.medium


@frozen(slots=True)
class ClearedBlocks:
    """Every cached block was dropped (cache reset); never emitted by the built-in pool."""


KvEventData = StoredBlocks | RemovedBlocks | ClearedBlocks


@frozen(slots=True)
class KvEvent:
    """``event_id`` is monotonic and rank-local, starting at 0 (dynamo-mocker.md §3.4)."""

    event_id: int
    dp_rank: int
    data: KvEventData


# --------------------------------------------------------------------------- pass start


@frozen(slots=True)
class CacheTierAttribution:
    g1_reused_input_tokens: int
    host_reused_input_tokens: int


@frozen(slots=True)
class Admission:
    """A waiting request admitted into a pass (emitted again after each preemption)."""

    request_id: RequestId
    reused_input_tokens: int
    cache_tier_attribution: CacheTierAttribution | None = None


class PressureKind(enum.Enum):
    VLLM_PREEMPTION = "vllm_preemption"
    SGLANG_RETRACTION = "sglang_retraction"
    TRTLLM_PAUSE = "trtllm_pause"  # servesim extension: MAX_UTILIZATION pauses a request


@frozen(slots=True)
class PressureState:
    running_requests: int
    waiting_requests: int | None
    active_blocks: int


@frozen(slots=True)
class PressureEvent:
    """A running request pushed back under KV pressure; ``at_ms`` is the pass start (§4.7)."""

    at_ms: float
    kind: PressureKind
    request_id: RequestId
    state_before: PressureState
    state_after: PressureState
    request_active_blocks_before: int
    logical_available_blocks_before: int | None = None
    required_blocks_before: int | None = None


@frozen(slots=True)
class PassStartEffects:
    """Visible as soon as a pass starts."""

    admissions: tuple[Admission, ...] = ()
    pressure_events: tuple[PressureEvent, ...] = ()
    kv_events: tuple[KvEvent, ...] = ()


EMPTY_START = PassStartEffects()


# --------------------------------------------------------------------------- handoff


class TransferTimingMode(enum.Enum):
    FULL_PROMPT = "full_prompt"
    DESTINATION_MISSING = "destination_missing"


@frozen(slots=True)
class HandoffTransferTiming:
    """Published by the source in ``SourceHeld`` (aisimulate-engine.md §8.1)."""

    mode: TransferTimingMode
    full_prompt_tokens: int
    kv_bytes_per_token: float | None = None
    bandwidth_gb_s: float | None = None
    state_bytes: int = 0

    def delay_ms(self, destination_missing_tokens: int) -> float | None:
        tokens = (
            self.full_prompt_tokens
            if self.mode is TransferTimingMode.FULL_PROMPT
            else destination_missing_tokens
        )
        return _transfer_ms(tokens, self.kv_bytes_per_token, self.bandwidth_gb_s, self.state_bytes)

    def full_prompt_delay_ms(self) -> float | None:
        return _transfer_ms(
            self.full_prompt_tokens, self.kv_bytes_per_token, self.bandwidth_gb_s, self.state_bytes
        )


def _transfer_ms(
    tokens: int, bytes_per_token: float | None, bandwidth_gb_s: float | None, state_bytes: int
) -> float | None:
    if bytes_per_token is None or bandwidth_gb_s is None or not bandwidth_gb_s > 0:
        return None
    return (tokens * bytes_per_token + state_bytes) / (bandwidth_gb_s * 1e9) * 1000.0


class WorkerType(enum.Enum):
    AGGREGATED = "aggregated"
    PREFILL = "prefill"
    DECODE = "decode"


def prefill_handoff_delay_ms(
    worker_type: WorkerType,
    completed: bool,
    num_input_tokens: int,
    bandwidth_gb_s: float | None,
    kv_bytes_per_token: float | None,
) -> float | None:
    """Transfer delay of a completed prefill on a prefill worker, else ``None``.

    Matches aisimulate-engine.md §8.1 / dynamo-mocker.md §7.2: 128 tokens × 1e6 B at
    1 GB/s → 128 ms.
    """
    if worker_type is not WorkerType.PREFILL or not completed:
        return None
    return _transfer_ms(num_input_tokens, kv_bytes_per_token, bandwidth_gb_s, 0)


# --------------------------------------------------------------------------- lifecycle


@frozen(slots=True)
class SourceHeld:
    handoff_id: HandoffId
    request_id: RequestId
    transfer_timing: HandoffTransferTiming


@frozen(slots=True)
class DestinationReserved:
    handoff_id: HandoffId
    request_id: RequestId
    transferable_prompt_tokens: int


LifecycleEvent = SourceHeld | DestinationReserved


# --------------------------------------------------------------------------- outputs


@frozen(slots=True)
class Output:
    """One output signal (aisimulate-engine.md §4.5).

    ``token_id`` None with ``completed`` True is a terminal-without-token signal;
    ``rejected`` marks admission rejection. ``cached_tokens`` is set on a request's first
    output only.
    """

    request_id: RequestId
    token_id: int | None
    completed: bool = False
    rejected: bool = False
    cached_tokens: int | None = None


@attrs.define(slots=True)
class OutputBatch:
    """The outputs of one pass, columnar.

    * ``token_request_ids``: one entry per emitted token, in emission order.
    * ``token_ids``: parallel token values, or ``None`` when the rank does not materialise
      them (replay needs only counts and times).
    * ``completed``: requests whose ownership ended with this pass (their last token, or a
      terminal-without-token signal when they emitted no token this pass).
    * ``rejected``: the subset of ``completed`` rejected at admission.
    * ``cached_tokens``: prompt tokens served from KV at first admission, for requests whose
      first output is in this batch.

    Mutable only while a rank builds it or while a command suppresses a request's outputs
    in a retained pending pass (reference §3, "Suppression").
    """

    token_request_ids: list[RequestId] = field(factory=list)
    token_ids: list[int] | None = None
    completed: list[RequestId] = field(factory=list)
    rejected: list[RequestId] = field(factory=list)
    cached_tokens: dict[RequestId, int] = field(factory=dict)

    def is_empty(self) -> bool:
        return not self.token_request_ids and not self.completed

    def outputs(self) -> Iterator[Output]:
        """Rich per-token :class:`Output` objects, in emission order, terminals last.

        When the rank did not materialise token values, ``token_id`` is 0 for real tokens.
        """
        done = set(self.completed)
        rejected = set(self.rejected)
        last_index: dict[RequestId, int] = {}
        for i, rid in enumerate(self.token_request_ids):
            last_index[rid] = i
        seen: set[RequestId] = set()
        ids = self.token_ids
        for i, rid in enumerate(self.token_request_ids):
            cached = None
            if rid not in seen:
                seen.add(rid)
                cached = self.cached_tokens.get(rid)
            yield Output(
                request_id=rid,
                token_id=ids[i] if ids is not None else 0,
                completed=rid in done and last_index[rid] == i,
                rejected=False,
                cached_tokens=cached,
            )
        for rid in self.completed:
            if rid not in last_index:
                yield Output(
                    request_id=rid,
                    token_id=None,
                    completed=True,
                    rejected=rid in rejected,
                    cached_tokens=self.cached_tokens.get(rid),
                )

    def remove_request(self, request_id: RequestId) -> bool:
        """Drop every output of one request; True if anything was removed."""
        removed = False
        if request_id in self.token_request_ids:
            keep = [i for i, r in enumerate(self.token_request_ids) if r != request_id]
            if self.token_ids is not None:
                self.token_ids = [self.token_ids[i] for i in keep]
            self.token_request_ids = [self.token_request_ids[i] for i in keep]
            removed = True
        if request_id in self.completed:
            self.completed.remove(request_id)
            removed = True
        if request_id in self.rejected:
            self.rejected.remove(request_id)
        self.cached_tokens.pop(request_id, None)
        return removed


# --------------------------------------------------------------------------- metrics


@frozen(slots=True)
class Metrics:
    """Rank-local occupancy snapshot (aisimulate-engine.md §4.9)."""

    dp_rank: int = 0
    active_blocks: int = 0
    inactive_blocks: int = 0
    total_blocks: int = 0
    running_requests: int = 0
    waiting_requests: int = 0
    preemptions_total: int = 0
    sglang_cache_hit_tokens: int = 0
    sglang_cache_total_tokens: int = 0

    @property
    def cache_usage(self) -> float:
        return self.active_blocks / self.total_blocks if self.total_blocks else 0.0

    @property
    def physical_cache_usage(self) -> float:
        if not self.total_blocks:
            return 0.0
        return (self.active_blocks + self.inactive_blocks) / self.total_blocks


@frozen(slots=True)
class ForwardPassMetrics:
    """One forward pass's scheduled and queued shape (dynamo-mocker.md §4.5; reference §4.9).

    Variances are population variances (Welford), 0 for empty or single-sample input.
    ``worker_id``/``dp_rank`` identify the rank; ``duration_ms`` is the modelled pass length.
    """

    worker_id: int = 0
    dp_rank: int = 0
    counter_id: int = 0
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0
    num_queued_prefill: int = 0
    sum_queued_prefill_tokens: int = 0
    var_queued_prefill_length: float = 0.0
    num_queued_decode: int = 0
    sum_queued_decode_kv_tokens: int = 0
    var_queued_decode_kv_tokens: float = 0.0
    duration_ms: float = 0.0


@frozen(slots=True)
class DecodeAcceptance:
    """Acceptance-length telemetry: plain decode contributes (1, 1) per request.

    With speculative decoding (servesim.mechanics.speculative) ``accepted_tokens`` counts the base
    token plus the accepted drafts of each verification forward, before clamping to the
    request's remaining output; ``nextn`` is the draft count and ``accepted_per_pos[i]``
    how many forwards accepted draft ``i`` (both empty without speculation).
    """

    accepted_tokens: int = 0
    forwards: int = 0
    nextn: int = 0
    accepted_per_pos: tuple[int, ...] = ()


@frozen(slots=True)
class CommandEffects:
    """Returned at once by a command (reference §4.3)."""

    result: CommandResult
    lifecycle_events: tuple[LifecycleEvent, ...] = ()
    kv_events: tuple[KvEvent, ...] = ()
    retired_requests: tuple[RequestId, ...] = ()
    metrics: Metrics | None = None
    suppressed_pending_output: bool = False


@attrs.define(slots=True)
class ScheduleRecord:
    """What one pass scheduled, for pass logs and step-by-step conformance (issue 9).

    Filled only when the rank was built with ``RankServices.record_schedule``. ``scheduled``
    maps request id → tokens computed this pass, in batch order; ``new_hits`` maps request id
    → prefix-cache hit tokens for requests admitted from waiting this pass; ``resumed`` are
    previously preempted requests readmitted this pass; ``preempted`` and ``finished`` are
    requests preempted / finished in this pass; ``running``, ``waiting`` and ``free_blocks``
    are the counts after the pass. ``engine_fields`` holds what a backend reports beyond
    these, under the names its engine's own step trace uses (the pass log writes the ones
    :data:`servesim.replay.passlog.ENGINE_FIELDS` knows, after the common fields).
    """

    scheduled: dict[RequestId, int] = field(factory=dict)
    new_hits: dict[RequestId, int] = field(factory=dict)
    resumed: list[RequestId] = field(factory=list)
    preempted: list[RequestId] = field(factory=list)
    finished: list[RequestId] = field(factory=list)
    running: int = 0
    waiting: int = 0
    free_blocks: int = 0
    engine_fields: dict[str, Any] = field(factory=dict)


@attrs.define(slots=True)
class PassCompletionEffects:
    """Released at the modelled completion boundary (reference §4.3).

    Not frozen: a command arriving mid-pass may suppress a request's retained outputs and
    lifecycle events; once released to the driver it must be treated as read-only.
    ``forward_pass_metrics`` is None when the rank was built without FPM capture.
    """

    outputs: OutputBatch = field(factory=OutputBatch)
    lifecycle_events: list[LifecycleEvent] = field(factory=list)
    kv_events: list[KvEvent] = field(factory=list)
    metrics: Metrics | None = None
    forward_pass_metrics: ForwardPassMetrics | None = None
    decode_acceptance: DecodeAcceptance = DecodeAcceptance()
    schedule: ScheduleRecord | None = None


# --------------------------------------------------------------------------- helpers


def outputs_for(batch: OutputBatch, request_ids: Sequence[RequestId]) -> list[Output]:
    """The rich outputs of some requests (test helper, not for hot paths)."""
    wanted = set(request_ids)
    return [o for o in batch.outputs() if o.request_id in wanted]


__all__ = [
    "APPLIED",
    "ActivateDestination",
    "Admission",
    "CacheTierAttribution",
    "CancelDestination",
    "CancelRequest",
    "CancelSource",
    "ClearedBlocks",
    "Command",
    "CommandEffects",
    "CommandResult",
    "DecodeAcceptance",
    "DestinationReserved",
    "EMPTY_START",
    "ForwardPassMetrics",
    "HandoffId",
    "HandoffTransferTiming",
    "KvBlock",
    "KvEvent",
    "KvEventData",
    "LifecycleEvent",
    "Metrics",
    "NOOP",
    "Output",
    "OutputBatch",
    "PassCompletionEffects",
    "PassStartEffects",
    "PressureEvent",
    "PressureKind",
    "PressureState",
    "ReleaseSource",
    "RemovedBlocks",
    "Request",
    "ScheduleRecord",
    "RequestId",
    "ReserveDestination",
    "ResultKind",
    "SourceHeld",
    "StoredBlocks",
    "Submit",
    "SubmitHandoffPrefill",
    "TransferTimingMode",
    "WorkerType",
    "outputs_for",
    "prefill_handoff_delay_ms",
]
