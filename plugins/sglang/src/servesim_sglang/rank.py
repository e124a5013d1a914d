"""``SglangRank``: the SGLang scheduler behind servesim's rank contract.

Contract behaviour follows aisimulate-engine.md §3 (``SchedulerRank`` with its SGLang core):
passes are committed eagerly and their outputs, KV events (``PassEnd`` visibility), metrics
and forward-pass metrics are released only by ``complete_pass``; admissions and retraction
pressure events are pass-start effects; a duplicate ``Submit`` is rejected without change;
``CancelRequest`` frees the request's KV and suppresses its retained outputs. Metrics follow
§4.9: ``active_blocks`` counts every occupied page (radix-resident ones included),
``inactive_blocks`` is 0, and the SGLang hit/total token counts are pass-local.

Deliberate differences from the reference:

* ``preemptions_total`` counts retractions (the reference reports 0 for SGLang), so a user can
  see memory pressure in the metrics without capturing pressure events.
* No hangs where the reference would stall: a request that can never be admitted even by an
  empty rank (``ceil_to_page(sequence) + min(remaining output, clip) >= total tokens``) is
  rejected (``Output.rejected``) at the next pass — at submission, or, for a retracted request
  whose output grew, when nothing runs; and a lone running request whose next token finds no
  page even after eviction ends rejected after the tokens it produced.

Disaggregated handoff (prefill/decode worker types and the six handoff commands) is core's
:class:`servesim.mechanics.handoff.HandoffBook` over :mod:`servesim_sglang.handoff`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

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
    ScheduleRecord,
    Submit,
    WorkerType,
)
from servesim.errors import CommandRejected, PluginError
from servesim.fast.rank_runs import RunsOfPasses
from servesim.fast.runs import RankRun, RunEffects
from servesim.kv.warm_start import WarmLoad, WarmPath
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
    RetryHint,
    SameTimestampRetry,
    SpeculativeDecoding,
    WarmCache,
)
from servesim.timing.pricing import ShapePricer

from servesim_sglang.config import SglangConfig, scheduler_params, validate
from servesim_sglang.fast import runs as _runs
from servesim_sglang.handoff import SglangHandoffAdapter
from servesim_sglang.interfaces import RankCounters
from servesim_sglang.pass_outcome import PassOutcome
from servesim_sglang.policies import resolve_policy
from servesim_sglang.priority import ordering
from servesim_sglang.radix_records import make_radix_cache
from servesim_sglang.recv_interval import RecvSkipper
from servesim_sglang.request import SglangRequest
from servesim_sglang.scheduler import SglangScheduler
from servesim_sglang.warm_start import preload_radix


@define
class _Pending:
    started_at_ms: float
    effects: PassCompletionEffects
    hit_tokens: int = 0
    total_tokens: int = 0
    fpm: dict[str, Any] | None = None  # ForwardPassMetrics fields; duration set at completion


class SglangRank(Rank[_Pending, SglangConfig], GroupPassHooks, Handoff, SpeculativeDecoding,
                 WarmCache, RunsOfPasses[_runs.SglangRunPending]):
    """One SGLang scheduler rank (radix cache, new-token-ratio admission, retraction): prefill
    and decode workers of a split (handoff.py), speculative decoding, runs of passes."""

    config_class = SglangConfig
    default_block_size = 1
    # The tree keeps SGLang's own LRU order for lru; a record policy orders its leaf pages.
    eviction_support = frozenset({"lru", "records"})
    # Disaggregated replay reserves an SGLang decode worker's KV before the prefill runs
    # (servesim.replay.disagg; SGLang's decode side pre-allocates for the transfer).
    reserve_destination_first = True

    def __init__(
        self,
        identity: RankIdentity,
        config: EngineConfig,
        backend_config: Any,
        services: RankServices,
        *,
        policy_registry: Any = None,
    ) -> None:
        sg = backend_config if backend_config is not None else SglangConfig()
        super().__init__(identity, config, sg, services)
        self.params = scheduler_params(config, sg, identity.dp_size)
        policy_cls = resolve_policy(sg.schedule_policy, policy_registry)
        cache = make_radix_cache(
            self.params.total_tokens,
            self.params.page_size,
            eviction=services.new_eviction_policy(),
            enable_prefix_caching=config.enable_prefix_caching,
            emit_kv_events=services.emit_kv_events and config.enable_prefix_caching,
            emit_token_ids=config.emit_kv_token_ids,
            dp_rank=identity.dp_rank,
        )
        cache.evict_whole_leaves = self.params.behaviour.evict_whole_leaves
        cache.sglang_recency = self.params.behaviour.split_refreshes_recency
        cache.child_per_insert = self.params.behaviour.child_per_insert
        self.sched = SglangScheduler(
            self.params,
            cache,
            ordering(policy_cls(seed=identity.seed_offset), self.params, sg.schedule_policy),
            services.timing,
            speedup=config.speedup_ratio,
            decode_speedup=config.decode_speedup_ratio,
            worker_type=config.worker_type,
        )
        self.sched.shapes = ShapePricer.for_rank(services.timing, config, identity.dp_rank)
        self.cache = cache
        self.requests: dict[int, SglangRequest] = {}
        self.handoff = SglangHandoffAdapter(self)
        self.stalled: tuple[int, int] | None = None  # see waiting_for_external_command
        self.book = HandoffBook(self.handoff)
        self.sched.handoff = self.handoff
        self.sched.spec = Speculation.build(config, identity.seed_offset)
        # SGLang's overlap loop (servesim_sglang.overlap) for an aggregated worker without
        # speculative decoding; the others process each pass's results within it.
        self.sched.overlap = (
            self.params.behaviour.overlap_schedule
            and config.worker_type is WorkerType.AGGREGATED
            and self.sched.spec is None
        )
        # SGLang's --enable-mixed-chunk (servesim_sglang.mixed), aggregated workers only.
        self.sched.mix = self.params.mixed_chunk and config.worker_type is WorkerType.AGGREGATED
        self.counters = RankCounters()
        # SGLang's --scheduler-recv-interval (servesim_sglang.recv_interval), None when 1.
        self.recv = RecvSkipper.build(sg.scheduler_recv_interval, identity.dp_size)
        # The overlap loop's unread requests (behaviour overlap_read_lag), None without it.
        self.read_lag: OverlapInbox[SglangRequest] | None = (
            OverlapInbox() if self.sched.overlap and self.params.behaviour.overlap_read_lag else None)
        self.last_pass: str | None = None  # the previous pass's kind, for the skipper
        self.prefilled = False
        self.model_work = False
        self._queued: tuple[int, tuple[int, int, float], tuple[int, int, float]] = (
            -1,
            (0, 0, 0.0),
            (0, 0, 0.0),
        )

    @classmethod
    def default_block_size_for(cls, backend_config: Any) -> int:
        """``engine.sglang.page_size`` when set, else 1 (dynamo-mocker.md §1.1)."""
        page = getattr(backend_config, "page_size", None)
        return page if isinstance(page, int) and page > 0 else cls.default_block_size

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: Any) -> list[tuple[str, str]]:
        sg = backend_config if backend_config is not None else SglangConfig()
        problems = validate(config, sg)
        try:
            resolve_policy(sg.schedule_policy)
        except PluginError as exc:
            problems.append(("engine.sglang.schedule_policy", str(exc)))
        chunk = sg.chunked_prefill_size
        if config.dp_size > 1 and isinstance(chunk, int) and chunk > 0 and chunk // config.dp_size == 0:
            problems.append(
                (
                    "engine.sglang.chunked_prefill_size",
                    f"{sg.chunked_prefill_size} divided by dp_size {config.dp_size} is 0",
                )
            )
        return problems

    # -- commands -----------------------------------------------------------------------

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        if isinstance(command, Submit):
            return self.submit(command, ctx)
        if isinstance(command, CancelRequest):
            return self._cancel(command, ctx, pending)
        book = self.book
        busy = ctx.pass_in_flight
        retained = pending.effects if isinstance(pending, (_Pending, _runs.SglangRunPending)) else None
        return book.apply(command, busy, retained)

    def submit(self, command: Submit, ctx: CommandContext) -> CommandEffects:
        request = command.request
        rid = request.request_id
        if rid in self.requests:
            raise CommandRejected(f"request {rid} is already active")
        req = SglangRequest(request)
        self.requests[rid] = req
        p = self.params
        need = self.cache.pages_for(req.prompt_len) * p.page_size
        if need + min(req.max_out, p.clip_max_new_tokens) >= p.total_tokens:
            self.counters.rejected.append(rid)
        elif self.read_lag is not None:
            self.read_lag.hold(ctx.now_ms, rid, req)  # read when the pass before its own starts
        elif self.recv is not None and (self.sched.running or self.sched.waiting):
            self.recv.inbox.append(req)  # read by a later loop iteration
        else:
            self.sched.enqueue(req)
        return self._effects(CommandResult.submitted(rid), ctx)

    def _cancel(self, command: CancelRequest, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        rid = command.request_id
        removed = self.handoff.cancel_request(rid)
        removed = self.book.forget_request(rid) or removed
        suppressed = False
        if isinstance(pending, (_Pending, _runs.SglangRunPending)) and (
            removed or command.discard_pending_output
        ):
            suppressed = suppress_request(pending.effects, rid)
        retired = (rid,) if removed or suppressed else ()
        result = APPLIED if removed else NOOP
        return self._effects(result, ctx, retired=retired, suppressed=suppressed)

    def drop(self, rid: int) -> None:
        """Remove a live request and free its KV (cancellation)."""
        if rid in self.counters.rejected:
            self.counters.rejected.remove(rid)
        elif self.recv is not None and any(r.rid == rid for r in self.recv.inbox):
            self.recv.inbox = [r for r in self.recv.inbox if r.rid != rid]
        elif self.read_lag is not None and self.read_lag.drop(rid):
            pass
        else:
            self.sched.remove(rid)
        del self.requests[rid]

    def _effects(
        self,
        result: CommandResult,
        ctx: CommandContext,
        *,
        retired: tuple[int, ...] = (),
        suppressed: bool = False,
    ) -> CommandEffects:
        kv = () if ctx.pass_in_flight else tuple(self.cache.drain_events())
        return CommandEffects(
            result=result,
            kv_events=kv,
            retired_requests=retired,
            metrics=self.metrics(),
            suppressed_pending_output=suppressed,
        )

    # -- readiness ------------------------------------------------------------------------

    def is_ready(self) -> bool:
        s = self.sched
        return bool(s.waiting or s.running or self.counters.rejected or self.handoff.activated
                    or (self.recv is not None and self.recv.inbox) or self.read_lag) or self.book.can_retry

    def preload_cache(self, paths: Sequence[WarmPath]) -> WarmLoad:
        """A warm start (servesim.rank.WarmCache): the paths enter the radix tree as
        unlocked, evictable pages (servesim_sglang.warm_start)."""
        return preload_radix(self.cache, paths)

    def is_drained(self) -> bool:
        s = self.sched
        busy = (s.waiting or s.running or self.counters.rejected or self.handoff.activated
                or (self.recv is not None and self.recv.inbox) or self.read_lag)
        return not busy and not self.book.holding

    def waiting_for_external_command(self) -> bool:
        """Only handoff state blocks the rank: a pending destination holds the waiting queue
        back, or the last pass admitted nothing while held sources / reserved destinations
        occupy KV, and no page or queue change happened since (so another pass would be as
        empty; admission itself decides, not a prediction of it)."""
        s = self.sched
        book = self.book
        if not book.holding or s.running or self.handoff.activated or not s.waiting:
            return False
        if book.blocks_admission:
            return True
        return self.stalled == (self.cache.releases, s.waiting_version)

    def prepare_group_pass(self, wave_step: int, dp_size: int) -> None:
        self.prefilled = False
        self.model_work = False

    def prefill_in_pass(self) -> bool:
        return self.prefilled

    def model_work_in_pass(self) -> bool:
        return self.model_work

    # -- passes ---------------------------------------------------------------------------

    def execute_pass(self, now_ms: float) -> RankPass:
        recv = self.recv
        if self.read_lag is not None:
            read = self.read_lag.pass_starts(now_ms, bool(self.sched.running or self.sched.waiting))
            if recv is not None:
                recv.inbox.extend(read)
            else:
                for req in read:
                    self.sched.enqueue(req)
        if recv is not None:
            reads = recv.reads(self.last_pass)
            if recv.inbox and (reads or not (self.sched.running or self.sched.waiting)):
                for req in recv.take():
                    self.sched.enqueue(req)
        ratio_before = self.sched.ratio
        out = self.sched.run_pass(now_ms)
        self.last_pass = ("prefill" if out.prefill_pass else "decode") if out.model_work else None
        self.counters.passes += 1
        self.prefilled = out.prefill_pass and out.model_work
        self.model_work = out.model_work
        # out.finished: finishes the overlap loop processed this pass (servesim_sglang.overlap),
        # which free slots and KV for the requests waiting behind them
        idle = not (out.admissions or out.token_rids or out.completed or out.model_work or out.finished)
        self.stalled = (self.cache.releases, self.sched.waiting_version) if idle else None
        for rid in out.completed:
            self.requests.pop(rid, None)
        batch = OutputBatch(
            token_request_ids=out.token_rids,
            token_ids=out.token_ids,
            completed=out.completed,
            cached_tokens=out.cached_tokens,
        )
        batch.rejected.extend(out.rejected)
        for rid in out.rejected:
            self.requests.pop(rid, None)
        if self.counters.rejected:
            for rid in self.counters.rejected:
                self.requests.pop(rid, None)
                batch.completed.append(rid)
                batch.rejected.append(rid)
            self.counters.rejected = []
        hit = sum(item[3] for item in out.prefill_items)
        total = sum(item[3] + item[1] for item in out.prefill_items)
        effects = PassCompletionEffects(
            outputs=batch,
            decode_acceptance=(DecodeAcceptance(out.decode_forwards, out.decode_forwards)
                               if self.sched.spec is None else self.sched.spec.sampler.tally.take()),
            schedule=self._schedule_record(out) if self.services.record_schedule else None,
        )
        if self.book.events:
            effects.lifecycle_events = self.book.drain_events()  # SourceHeld (§4.8)
        start = PassStartEffects(admissions=tuple(out.admissions), pressure_events=tuple(out.pressure))
        hint = _RETRY if self.sched.ratio != ratio_before or out.finished else _EXHAUSTED
        fpm = self.fpm(out) if self.services.emit_forward_pass_metrics else None
        pending = _Pending(now_ms, effects, hit, total, fpm)
        return RankPass(end_ms=out.end_ms, start_effects=start, pending=pending, retry=hint)

    def complete_pass(self, pending: Any, end_ms: float) -> PassCompletionEffects:
        assert isinstance(pending, _Pending)
        effects = pending.effects
        if self.read_lag is not None:
            self.read_lag.pass_ends(end_ms)
        self.book.at_pass_boundary(effects)
        effects.kv_events = self.cache.drain_events()
        effects.metrics = self.metrics(pending.hit_tokens, pending.total_tokens)
        if pending.fpm is not None:
            duration = max(0.0, end_ms - pending.started_at_ms)
            effects.forward_pass_metrics = ForwardPassMetrics(**pending.fpm, duration_ms=duration)
        return effects

    # Runs may continue through completions when nothing waits (page size 1; servesim.fast.runs).
    runs_through_completions: ClassVar[bool] = True

    def execute_run(
        self, now_ms: float, horizon_ms: float, max_passes: int, through_completions: bool = False
    ) -> RankRun | None:
        """A run of steady decode passes (servesim_sglang.fast.runs), or None to step."""
        if (self.cache.steps_only or self.sched.spec is not None or self.params.priority is not None
                or (self.sched.mix and self.sched.waiting)):
            # A record eviction policy needs every step; a run's passes emit one token per
            # member, and speculative bursts, priority preemption and a queue under mixed
            # steps (whose budgets a run's held queue head does not model) need stepping.
            return None
        if self.recv is not None and self.recv.inbox:
            return None  # requests not read yet: each pass decides whether it reads them
        return _runs.execute_run(self, now_ms, horizon_ms, max_passes, through_completions)

    def complete_run(self, pending: _runs.SglangRunPending, end_ms: float) -> RunEffects:
        if self.recv is not None and pending.ends:
            # the run's passes were loop iterations that read nothing (the inbox was empty)
            self.recv.reads(self.last_pass)
            self.recv.decode_passes(len(pending.ends) - 1)
            self.last_pass = "decode"
        return _runs.complete_run(self, pending, end_ms)

    def take_run_kv_events(
        self, pending: _runs.SglangRunPending, before_pass: int
    ) -> dict[int, list[KvEvent]]:
        return _runs.take_kv_events(pending, before_pass)

    def complete_idle_group_pass(self, started_at_ms: float, end_ms: float) -> PassCompletionEffects:
        effects = PassCompletionEffects(
            forward_pass_metrics=self.idle_forward_pass_metrics(started_at_ms, end_ms)
        )
        self.book.at_pass_boundary(effects)
        effects.kv_events = self.cache.drain_events()
        effects.metrics = self.metrics()
        return effects


    # -- observation ----------------------------------------------------------------------

    def metrics(self, hit_tokens: int = 0, total_tokens: int = 0) -> Metrics:
        return Metrics(
            dp_rank=self.identity.dp_rank,
            active_blocks=self.cache.used_pages,
            inactive_blocks=0,
            total_blocks=self.cache.total_pages,
            running_requests=len(self.sched.running),
            waiting_requests=len(self.sched.waiting),
            preemptions_total=self.sched.retractions_total,
            sglang_cache_hit_tokens=hit_tokens,
            sglang_cache_total_tokens=total_tokens,
        )

    def fpm(self, out: PassOutcome) -> dict[str, Any]:
        pre = Welford()
        sum_pre = sum_kv = 0
        for prompt_len, computed, prefix, _ in out.prefill_items:
            if computed > 0:
                pre.add(prompt_len)
                sum_pre += computed
                sum_kv += prefix
        dec = _moments(out.decode_lens)
        qp, qd = self._queued_stats()
        return dict(
            worker_id=self.identity.worker_id,
            dp_rank=self.identity.dp_rank,
            counter_id=self.counters.passes,
            num_prefill_requests=pre.n,
            sum_prefill_tokens=sum_pre,
            var_prefill_length=pre.variance(),
            sum_prefill_kv_tokens=sum_kv,
            num_decode_requests=dec[0],
            sum_decode_kv_tokens=dec[1],
            var_decode_kv_tokens=dec[2],
            num_queued_prefill=qp[0],
            sum_queued_prefill_tokens=qp[1],
            var_queued_prefill_length=qp[2],
            num_queued_decode=qd[0],
            sum_queued_decode_kv_tokens=qd[1],
            var_queued_decode_kv_tokens=qd[2],
        )

    def _queued_stats(self) -> tuple[tuple[int, int, float], tuple[int, int, float]]:
        """(count, sum, population variance) of queued prefills (prompt lengths) and queued
        decodes (retracted requests' sequence lengths), recomputed only when the waiting
        queue's membership changed (a long queue is otherwise rescanned every pass)."""
        version = self.sched.waiting_version
        if self._queued[0] != version:
            prefill = [r.prompt_len for r in self.sched.waiting if r.output_len == 0]
            decode = [r.seq_len for r in self.sched.waiting if r.output_len > 0]
            self._queued = (version, _moments(prefill), _moments(decode))
        return self._queued[1], self._queued[2]

    def _schedule_record(self, out: PassOutcome) -> ScheduleRecord:
        """The pass as SGLang's step trace shows it (servesim.replay.passlog, ``engine_fields``).

        SGLang keeps its chunked request out of the waiting queue (``Scheduler.chunked_req``),
        so it counts as running here; its running batch holds the decoding requests (a
        prefill batch joins it at the next step), those finished in a decode step included.
        """
        s, cache = self.sched, self.cache
        head = s.waiting[0] if s.waiting else None
        chunked = head if head is not None and 0 < head.materialized < head.seq_len else None
        extend = 0
        if out.mixed_decode:  # servesim_sglang.mixed: the decodes ride the prefill batch
            decode = out.mixed_decode
            mixed = set(decode)
            mode, prefill = "mixed", {k: v for k, v in out.scheduled.items() if k not in mixed}
            running_batch = 0
            extend = len(decode)  # extend_num_tokens counts each decode's one token
        elif out.prefill_pass:
            mode, prefill, decode = "prefill", dict(out.scheduled), []
            running_batch = out.running_before
        else:
            mode = "decode" if out.scheduled else "idle"
            prefill, decode = {}, list(out.scheduled)
            running_batch = len(decode)
        if out.running_batch is not None:
            running_batch = out.running_batch
        held = 1 if chunked is not None else 0
        return ScheduleRecord(
            scheduled=dict(out.scheduled),
            new_hits={a.request_id: a.reused_input_tokens for a in out.admissions},
            resumed=list(out.resumed),
            preempted=list(out.retracted),
            finished=list(out.finished),
            running=len(s.running) + held,
            waiting=len(s.waiting) - held,
            free_blocks=cache.free_pages,
            engine_fields={
                "mode": mode,
                "prefill": prefill,
                "decode": decode,
                "chunked": None if chunked is None else chunked.rid,
                "retracted": list(out.retracted),
                "running_batch": running_batch,
                "extend_tokens": sum(prefill.values()) + extend,
                "free_tokens": cache.available_tokens,
                "evictable_tokens": cache.evictable_size,
                "protected_tokens": cache.protected_size,
                "new_token_ratio": round(float(s.ratio), 6),
            },
        )


_RETRY = RetryHint(SameTimestampRetry.RETRY)
_EXHAUSTED = RetryHint(SameTimestampRetry.EXHAUSTED)


def _moments(values: list[int]) -> tuple[int, int, float]:
    n = len(values)
    if n < 2:
        return n, sum(values), 0.0
    total = sum(values)
    mean = total / n
    return n, total, sum((v - mean) ** 2 for v in values) / n


__all__ = ["SglangRank"]
