"""``TrtllmRank``: one TensorRT-LLM scheduler rank behind servesim's neutral contract.

The contract side follows aisimulate-engine.md §3 (``SchedulerRank``) and §4: a pass is
committed eagerly at its start (admissions and pause pressure events are visible then);
outputs, KV events, metrics and forward-pass metrics are retained and released at
``complete_pass``. KV events produced by a command while a pass is in flight stay buffered
in the pool until that boundary (§4.6 "PassEnd" visibility). ``CancelRequest`` removes the
request's state and suppresses its retained outputs (§3 "Suppression"); a duplicate
``Submit`` of an active request is refused without mutation (§4.2).

Disaggregated handoff (prefill/decode worker types, the six handoff commands) is
core's :class:`servesim.mechanics.handoff.HandoffBook` over :mod:`servesim_trtllm.handoff`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
from attrs import define
from servesim.config.engine import EngineConfig
from servesim.contract import (
    APPLIED,
    NOOP,
    CancelRequest,
    Command,
    CommandEffects,
    CommandResult,
    DecodeAcceptance,
    ForwardPassMetrics,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Request,
    ScheduleRecord,
    Submit,
    WorkerType,
)
from servesim.errors import CommandRejected, ConfigError
from servesim.fast.event_readers import EventReaders, FitsReaders
from servesim.fast.rank_runs import RunsOfPasses
from servesim.fast.runs import RankRun, RunEffects
from servesim.kv.eviction_records import make_block_pool
from servesim.kv.warm_start import WarmLoad, WarmPath, preload_pool
from servesim.mechanics.handoff import HandoffBook, suppress_request
from servesim.mechanics.numeric import Welford
from servesim.mechanics.overlap_inbox import OverlapInbox
from servesim.mechanics.speculative import Speculation
from servesim.rank import (
    CommandContext,
    GroupPassHooks,
    Handoff,
    Rank,
    RankIdentity,
    RankPass,
    RankServices,
    SpeculativeDecoding,
    WarmCache,
)
from servesim.timing.pricing import ShapePricer
from servesim.timing.shape import PrefillChunk

from servesim_trtllm import speculative as _speculative
from servesim_trtllm.batch_wait import BatchWait
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig, effective_limits, validate
from servesim_trtllm.core import TrtCore
from servesim_trtllm.fast import runs as _runs
from servesim_trtllm.fast.steady import after_step, emit_members, steady_step
from servesim_trtllm.handoff import TrtHandoffAdapter
from servesim_trtllm.policies import (
    admit_reference,
    schedule_max_utilization,
    schedule_reference,
    schedule_static_batch,
)
from servesim_trtllm.work import StepWork


@define(slots=True)
class TrtllmPending:
    """A committed pass's retained completion effects."""

    started_at_ms: float
    effects: PassCompletionEffects


def _step_budget(core: TrtCore) -> float:
    limit = core.limits.max_num_tokens
    return float("inf") if limit is None else float(limit)


class TrtllmRank(Rank[TrtllmPending, TrtllmConfig], GroupPassHooks, Handoff, SpeculativeDecoding,
                 WarmCache, RunsOfPasses[_runs.TrtRunPending], FitsReaders):
    """The ``trtllm`` backend (capacity policy from ``engine.trtllm.capacity_scheduler_policy``):
    prefill and decode workers of a split (handoff.py), speculative decoding, runs of passes."""

    config_class = TrtllmConfig
    default_block_size = 32
    eviction_support = frozenset({"ids", "records"})

    def __init__(
        self,
        identity: RankIdentity,
        config: EngineConfig,
        backend_config: Any,
        services: RankServices,
    ) -> None:
        trt = backend_config if backend_config is not None else TrtllmConfig()
        super().__init__(identity, config, trt, services)
        problems = self.validate_config(config, trt)
        if problems:
            path, message = problems[0]
            raise ConfigError(message, path=path)
        pool = make_block_pool(
            config.num_gpu_blocks,
            eviction=services.new_eviction_policy(),
            block_size=config.bs,
            enable_prefix_caching=config.enable_prefix_caching,
            emit_events=services.emit_kv_events,
            dp_rank=identity.dp_rank,
        )
        self.core = TrtCore(
            config, trt, effective_limits(config, trt), pool, services.timing, identity.seed_offset
        )
        self.core.token_ids_in_events = config.emit_kv_token_ids and services.emit_kv_events
        # Speculative decoding (servesim_trtllm.speculative), None when aic_nextn is unset.
        self.spec = Speculation.build(config, identity.seed_offset)
        # Trace-unique prompt blocks, and every block after them, may take placeholders
        # when nothing outside the rank reads hashes (TokenSeq.block_hashes_elided; also
        # when only the KV router reads them, fit_readers).
        self.core.elide = config.enable_prefix_caching and not pool.events_enabled
        # Whether anything reads the occupancy snapshots (fit_readers).
        self.record_metrics = True
        self.handoff = TrtHandoffAdapter(self)
        self.stalled: tuple[int, int] | None = None  # see waiting_for_external_command
        self.book = HandoffBook(self.handoff)
        self.core.book = self.book
        self.policy = trt.capacity_scheduler_policy
        # TensorRT-LLM's batch waiting (servesim_trtllm.batch_wait), None when off.
        self.batch_wait = BatchWait.build(trt, config.dp_size)
        # The overlap scheduler's unread requests (servesim.mechanics.overlap_inbox), None
        # with disable_overlap_scheduler.
        self.inbox: OverlapInbox[Request] | None = (
            None if trt.disable_overlap_scheduler else OverlapInbox())
        self.fpm_counter = 0
        self.prefilled = False
        self.model_work = False
        self._shapes = ShapePricer.for_rank(services.timing, config, identity.dp_rank)

    def fit_readers(self, readers: EventReaders) -> None:
        """What the replay's readers take (servesim.fast.event_readers.FitsReaders)."""
        pool = self.core.pool
        if readers.kv_router_only:
            # Only the KV router reads the events (as the vllm rank): coalesce removals, and
            # publish nothing for placeholder blocks (no prompt can match them).
            pool.coalesce_removals = True
            pool.events_for_placeholders = False
            self.core.elide = self.config.enable_prefix_caching
        pool.event_records = readers.kv_records  # servesim.kv.event_records
        self.record_metrics = readers.occupancy

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: Any) -> list[tuple[str, str]]:
        trt = backend_config if backend_config is not None else TrtllmConfig()
        problems = validate(config, trt)
        limits = effective_limits(config, trt)
        native = trt.capacity_scheduler_policy is not CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
        bs = config.block_size if config.block_size is not None else cls.default_block_size
        tokens = limits.max_num_tokens
        if native and limits.chunked_context and tokens is not None and tokens < bs:
            key = (
                "engine.trtllm.max_num_tokens"
                if trt.max_num_tokens is not None
                else ("engine.max_num_batched_tokens")
            )
            problems.append((key, f"must be >= the block size ({bs}) with chunked context"))
        return problems

    # -- commands -----------------------------------------------------------------------

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        core = self.core
        if not isinstance(command, Submit):
            core.sync()  # a cancel or handoff command may read or change running requests
        if isinstance(command, Submit):
            rid = command.request.request_id
            inbox = self.inbox
            if rid in core.reqs or (inbox is not None and inbox.holds(rid)):
                raise CommandRejected(f"request {rid} is already active")
            if inbox is None:
                core.submit(command.request)
            else:
                inbox.hold(ctx.now_ms, rid, command.request)
            return self._command_effects(CommandResult.submitted(rid), ctx, ())
        if isinstance(command, CancelRequest):
            return self._cancel(command, ctx, pending)
        book = self.book
        busy = ctx.pass_in_flight
        retained = pending.effects if pending is not None else None
        return book.apply(command, busy, retained)

    def _cancel(
        self, command: CancelRequest, ctx: CommandContext,
        pending: TrtllmPending | _runs.TrtRunPending | None,
    ) -> CommandEffects:
        core = self.core
        r = core.reqs.get(command.request_id)
        if r is not None:
            self.handoff.cancel_request(r.rid)
        unread = self.inbox is not None and self.inbox.drop(command.request_id)
        removed = self.book.forget_request(command.request_id) or r is not None or unread
        retired: tuple[int, ...] = (command.request_id,) if removed else ()
        suppressed = False
        if pending is not None and (removed or command.discard_pending_output):
            suppressed = suppress_request(pending.effects, command.request_id)
            if suppressed and not retired:
                retired = (command.request_id,)
        effects = self._command_effects(APPLIED if removed else NOOP, ctx, retired)
        return attrs.evolve(effects, suppressed_pending_output=suppressed)

    def _command_effects(
        self, result: CommandResult, ctx: CommandContext, retired: tuple[int, ...]
    ) -> CommandEffects:
        kv = () if ctx.pass_in_flight else tuple(self.core.pool.drain_events())
        return CommandEffects(result=result, kv_events=kv, retired_requests=retired, metrics=self.metrics())

    # -- readiness ----------------------------------------------------------------------

    def is_ready(self) -> bool:
        core = self.core
        return bool(core.running or core.waiting or self.handoff.activated or self.inbox) \
            or self.book.can_retry

    def preload_cache(self, paths: Sequence[WarmPath]) -> WarmLoad:
        """A warm start (servesim.rank.WarmCache): the paths become cached, unreferenced
        blocks of this rank's pool."""
        return preload_pool(self.core.pool, paths)

    def is_drained(self) -> bool:
        return not self.core.reqs and not self.book.holding and not self.inbox

    def waiting_for_external_command(self) -> bool:
        """Only handoff state blocks the rank: a pending destination holds back fresh
        admission, or the last step admitted nothing while held sources / reserved
        destinations occupy KV and no block was freed and no request queued since (the
        capacity policy decides admission; this only remembers that it refused)."""
        core = self.core
        book = self.book
        if not book.holding or core.running or self.handoff.activated or not core.waiting:
            return False
        if book.blocks_admission:
            return True
        return self.stalled == (core.pool.releases, len(core.reqs))

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        # An idle sibling must not report the work of its previous pass.
        self.prefilled = self.model_work = False

    def prefill_in_pass(self) -> bool:
        return self.prefilled

    def model_work_in_pass(self) -> bool:
        return self.model_work

    # -- passes -------------------------------------------------------------------------

    def execute_pass(self, now_ms: float) -> RankPass:
        """One step: the capacity policy's schedule (:meth:`_schedule`), one prefill and one
        decode price, emission. ``members`` is the only fast path inside it (the steady
        batch's share, :meth:`_steady_members`); with None the step is the reference one."""
        core = self.core
        core.pool.now = now_ms
        if self.inbox is not None:
            for request in self.inbox.pass_starts(now_ms, bool(core.running or core.waiting)):
                core.submit(request)
        work = StepWork()
        held = None  # the queue, while batch waiting holds this step's contexts back
        if self.batch_wait is not None and self.batch_wait.holds(core):
            held, core.waiting = core.waiting, {}
        try:
            members = self._steady_members()
            if members is not None:
                admit_reference(core, work, _step_budget(core) - members)
            else:
                self._schedule(work, now_ms)
        finally:
            if held is not None:
                held.update(core.waiting)
                core.waiting = held
        worker = self.config.worker_type
        # Decode workers receive computed prompts; prefill workers emit the first token
        # from the prefill forward (dynamo-mocker.md §7.2).
        shapes = self._shapes
        if shapes is None:
            prefill_ms = 0.0 if worker is WorkerType.DECODE else core.prefill_ms(work)
            ready, priced, kv_tokens = core.ready_and_priced(work)
        else:  # the model prices the whole pass; members is None (runs decline)
            lens: list[int] = []
            ready, priced, kv_tokens = core.ready_and_priced(work, lens)
            chunks = [PrefillChunk(pt, pb) for _, pb, pt, _ in work.contexts if pt > 0]
            prefill_ms = shapes.price(chunks, lens, kv_tokens, core.capacity_tokens)
        spec = self.spec
        if spec is not None:
            priced, kv_tokens = _speculative.priced(ready)
        base = None
        if members is not None:  # every member samples, priced by the decode call
            assert core.steady is not None
            total, sq = core.steady.sums(core.steady.P)
            base = (members, total, sq)
            priced += members
            kv_tokens += total
        decode_ms = 0.0
        if worker is not WorkerType.PREFILL and shapes is None:
            decode_ms = core.decode_ms(priced, kv_tokens)
        outputs = OutputBatch()
        for r in work.rejected:
            outputs.completed.append(r.rid)
            outputs.rejected.append(r.rid)
        fpm = self._forward_pass_metrics(work, base)  # scheduled shape, before emission
        if members is not None:
            emit_members(core, outputs)  # the members come first in batch order
        if spec is None:
            finished = core.emit(ready, outputs)
        else:
            finished = _speculative.emit(core, spec, ready, outputs)
        if members is not None:
            after_step(core, work)
        self.prefilled = work.prefilled
        self.model_work = bool(work.scheduled or members)
        idle = not (work.scheduled or members or work.admissions or outputs.completed)
        self.stalled = (core.pool.releases, len(core.reqs)) if idle else None
        effects = PassCompletionEffects(
            outputs=outputs,
            kv_events=core.pool.drain_events(),
            forward_pass_metrics=fpm,
            decode_acceptance=(DecodeAcceptance(priced, priced) if spec is None
                               else spec.sampler.tally.take()),
            schedule=self._schedule_record(work, finished),
        )
        if self.book.events:
            effects.lifecycle_events = self.book.drain_events()  # SourceHeld (§4.8)
        start = PassStartEffects(admissions=tuple(work.admissions), pressure_events=tuple(work.pressure))
        end_ms = now_ms + prefill_ms + decode_ms
        return RankPass(end_ms, start, TrtllmPending(now_ms, effects))

    def _steady_members(self) -> int | None:
        """The fast-path seam of a step: with a steady batch left by a run
        (servesim_trtllm.fast.steady), a guaranteed-no-evict step without handoff state schedules
        the batch's members from it and returns how many it scheduled (their share of
        pricing, metrics and emission follows from the batch). Otherwise the batch's
        counters are written back (the policies read the requests) and None is returned."""
        core = self.core
        if core.steady is None:
            return None
        members = None
        if self.policy is CapacitySchedulerPolicy.GUARANTEED_NO_EVICT and not self._handoff_state():
            members = steady_step(core, _step_budget(core))
        if members is None:
            core.sync()
        return members

    def _schedule(self, work: StepWork, now_ms: float) -> None:
        """The capacity policy's step over the requests themselves."""
        core = self.core
        if self.handoff.activated:
            self.handoff.admit_activated(work, core.limits.max_batch_size)
        # A pending destination blocks fresh admission (§8.2 step 3): hide the queue.
        hidden = None
        if self.book.blocks_admission and core.waiting:
            hidden, core.waiting = core.waiting, {}
        try:
            if self.policy is CapacitySchedulerPolicy.GUARANTEED_NO_EVICT:
                schedule_reference(core, work)
            elif self.policy is CapacitySchedulerPolicy.STATIC_BATCH:
                schedule_static_batch(core, work)
            else:
                schedule_max_utilization(core, work, now_ms)
        finally:
            if hidden is not None:
                hidden.update(core.waiting)
                core.waiting = hidden

    def _handoff_state(self) -> bool:
        """Whether handoff bookkeeping could take part in a step (no steady batch then)."""
        book = self.book
        return bool(book.sources or book.dests or book.events or book.holding
                    or book.blocks_admission or self.handoff.activated)

    def complete_pass(self, pending: TrtllmPending, end_ms: float) -> PassCompletionEffects:
        effects = pending.effects
        if self.inbox is not None:
            self.inbox.pass_ends(end_ms)
        self.book.at_pass_boundary(effects)
        effects.kv_events.extend(self.core.pool.drain_events())
        effects.metrics = self.metrics()
        if effects.forward_pass_metrics is not None:
            effects.forward_pass_metrics = attrs.evolve(
                effects.forward_pass_metrics, duration_ms=max(0.0, end_ms - pending.started_at_ms)
            )
        return effects

    # Runs may continue through completions when the driver can take them mid-run.
    runs_through_completions: ClassVar[bool] = True

    def execute_run(self, now_ms: float, horizon_ms: float, max_passes: int,
                    through_completions: bool = False) -> RankRun | None:
        """A run of steady decode passes (servesim_trtllm.fast.runs), or None to step."""
        if self.core.pool.steps_only or self.spec is not None or self.inbox:
            # A record eviction policy needs every step; a run's passes emit one token per
            # member, speculative bursts need stepping, and so do unread requests (each pass
            # start may read some).
            return None
        return _runs.execute_run(self, now_ms, horizon_ms, max_passes, through_completions)

    def complete_run(self, pending: _runs.TrtRunPending, end_ms: float) -> RunEffects:
        if self.inbox is not None:
            self.inbox.run_ends(pending.started_at_ms, pending.ends)
        return _runs.complete_run(self, pending, end_ms)

    def take_run_kv_events(
        self, pending: _runs.TrtRunPending, before_pass: int
    ) -> dict[int, list[KvEvent]]:
        return _runs.take_kv_events(pending, before_pass)

    def complete_idle_group_pass(self, started_at_ms: float, end_ms: float) -> PassCompletionEffects:
        effects = PassCompletionEffects(
            forward_pass_metrics=self.idle_forward_pass_metrics(started_at_ms, end_ms)
        )
        if self.inbox is not None:  # the group's loop ran a pass (attention DP)
            self.inbox.run_ends(started_at_ms, (end_ms,))
        self.book.at_pass_boundary(effects)
        effects.kv_events = self.core.pool.drain_events()
        effects.metrics = self.metrics()
        return effects


    # -- telemetry ----------------------------------------------------------------------

    def metrics(self) -> Metrics | None:
        if not self.record_metrics:
            return None
        core = self.core
        return Metrics(
            dp_rank=self.identity.dp_rank,
            active_blocks=core.pool.num_active,
            inactive_blocks=core.pool.num_inactive,
            total_blocks=core.num_blocks,
            running_requests=len(core.running),
            waiting_requests=len(core.waiting) + (len(self.inbox) if self.inbox is not None else 0),
            preemptions_total=core.pauses_total,
        )

    def _forward_pass_metrics(
        self, work: StepWork, base: tuple[int, int, int] | None = None
    ) -> ForwardPassMetrics | None:
        """dynamo-mocker.md §4.5 / aisimulate-engine.md §4.9; queued decodes are paused
        requests (prompt + generated), the analogue of vLLM's preempted ones. ``base``:
        ``(count, Σ lengths, Σ squares)`` of the decodes of a steady batch's members, which
        are not in ``work``."""
        if not self.services.emit_forward_pass_metrics:
            return None
        prefill = Welford()
        prefill_tokens = prefill_kv = 0
        n, s1, s2 = base or (0, 0, 0)  # decodes: exact integer sums, not a per-item Welford
        decodes = [r for r in work.scheduled if r.rid not in work.context_ids]
        for r, pb, pt, tokens in work.contexts:
            if pt > 0:
                prefill.add(r.ctx_len)
                prefill_tokens += tokens
                prefill_kv += pb
            else:
                decodes.append(r)  # admitted fully cached: a decode for the reference
        for r in decodes:
            if r.max_output > r.generated:
                x = r.prompt_len + r.generated
                n += 1
                s1 += x
                s2 += x * x
        qp, qd = self.core.queued_prefill, self.core.queued_decode
        self.fpm_counter += 1
        return ForwardPassMetrics(
            worker_id=self.identity.worker_id,
            dp_rank=self.identity.dp_rank,
            counter_id=self.fpm_counter,
            num_prefill_requests=prefill.n,
            sum_prefill_tokens=prefill_tokens,
            var_prefill_length=prefill.variance(),
            sum_prefill_kv_tokens=prefill_kv,
            num_decode_requests=n,
            sum_decode_kv_tokens=s1,
            var_decode_kv_tokens=(n * s2 - s1 * s1) / (n * n) if n > 1 else 0.0,
            num_queued_prefill=qp.n,
            sum_queued_prefill_tokens=qp.s1,
            var_queued_prefill_length=qp.variance(),
            num_queued_decode=qd.n,
            sum_queued_decode_kv_tokens=qd.s1,
            var_queued_decode_kv_tokens=qd.variance(),
        )

    def _schedule_record(self, work: StepWork, finished: list[int]) -> ScheduleRecord | None:
        if not self.services.record_schedule:
            return None
        core = self.core
        return ScheduleRecord(
            scheduled={r.rid: t for r, t in zip(work.scheduled, work.tokens, strict=True)},
            new_hits=dict(work.new_hits),
            resumed=list(work.resumed),
            preempted=list(work.paused),
            finished=finished,
            running=len(core.running),
            waiting=len(core.waiting),
            free_blocks=core.num_blocks - core.pool.num_active,
        )
