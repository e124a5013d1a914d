"""``VllmRank``: the vLLM v1 scheduler behind servesim's neutral rank contract.

Contract behaviour follows aisimulate-engine.md §3 (``SchedulerRank``): a pass is committed
eagerly at ``execute_pass`` and its completion effects (outputs, KV events, metrics,
forward-pass metrics) stay hidden in the returned pending object until ``complete_pass``.
Admissions and preemption pressure events are visible at pass start; KV events produced by
a pass are published at pass end (``KvEventVisibility::PassEnd``, §4.6).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
from servesim.config.engine import EngineConfig
from servesim.contract import (
    APPLIED,
    NOOP,
    ActivateDestination,
    CancelRequest,
    Command,
    CommandEffects,
    CommandResult,
    ForwardPassMetrics,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    PassStartEffects,
    Request,
    ReserveDestination,
    ScheduleRecord,
    Submit,
    WorkerType,
)
from servesim.errors import CommandRejected
from servesim.fast.event_readers import EventReaders, FitsReaders
from servesim.fast.rank_runs import RunsOfPasses
from servesim.fast.runs import BlockRunPending, RankRun, RunEffects
from servesim.kv.host_tier import HostTier
from servesim.kv.warm_start import WarmLoad, WarmPath, preload_pool
from servesim.mechanics.handoff import HandoffBook, kv_bytes_per_token, suppress_request
from servesim.mechanics.lora import AdapterCache
from servesim.rank import (
    CommandContext,
    GroupPassHooks,
    Handoff,
    HostOffload,
    InternalWork,
    LoraAdapters,
    Rank,
    RankIdentity,
    RankPass,
    RankServices,
    SpeculativeDecoding,
    WarmCache,
)
from servesim.timing.base import scaled_ms

from servesim_vllm import behaviour as _behaviour
from servesim_vllm.async_scheduling import AsyncScheduling
from servesim_vllm.async_scheduling import problems as _async_problems
from servesim_vllm.config import VllmConfig
from servesim_vllm.fast import runs as _runs
from servesim_vllm.fast import steady as _steady
from servesim_vllm.handoff import VllmHandoffAdapter, head_blocked_externally
from servesim_vllm.pass_result import PassResult
from servesim_vllm.priority import problems as _priority_problems
from servesim_vllm.scheduler import VllmScheduler
from servesim_vllm.shape import shaped_pass_ms


@attrs.define(slots=True)
class VllmPendingPass:
    """A committed pass whose completion effects are not yet visible."""

    started_at_ms: float
    effects: PassCompletionEffects
    # Forward-pass metric fields but the duration, in the class's field order (_FPM_ORDER),
    # turned into ForwardPassMetrics (with the pass duration) at completion: one object per
    # pass instead of building and then evolving one, and positional (no keyword dict).
    fpm_fields: tuple[Any, ...] | None = None


# ForwardPassMetrics' fields in order: VllmRank.fpm_tuple's tuple follows it, the duration last.
_FPM_ORDER = (
    "worker_id", "dp_rank", "counter_id", "num_prefill_requests", "sum_prefill_tokens",
    "var_prefill_length", "sum_prefill_kv_tokens", "num_decode_requests",
    "sum_decode_kv_tokens", "var_decode_kv_tokens", "num_queued_prefill",
    "sum_queued_prefill_tokens", "var_queued_prefill_length", "num_queued_decode",
    "sum_queued_decode_kv_tokens", "var_queued_decode_kv_tokens", "duration_ms",
)
if tuple(a.name for a in attrs.fields(ForwardPassMetrics)) != _FPM_ORDER:
    raise ImportError("servesim_vllm.rank: ForwardPassMetrics' fields are not in the expected order")


class VllmRank(Rank[VllmPendingPass, VllmConfig], GroupPassHooks, Handoff, InternalWork, HostOffload,
               SpeculativeDecoding, WarmCache, LoraAdapters, RunsOfPasses[_runs.VllmRunPending],
               FitsReaders):
    """One vLLM scheduler rank with its own KV block pool: prefill and decode workers of a
    split (handoff.py), host offload (host_offload.py), speculative decoding
    (speculative.py) and runs of passes (fast/runs.py)."""

    config_class: ClassVar[type | None] = VllmConfig
    default_block_size: ClassVar[int] = 64
    eviction_support: ClassVar[frozenset[str]] = frozenset({"ids", "records"})

    def __init__(
        self,
        identity: RankIdentity,
        config: EngineConfig,
        backend_config: Any,
        services: RankServices,
    ) -> None:
        super().__init__(identity, config, backend_config, services)
        self.behaviour = _behaviour.resolve(backend_config)
        self.sched = VllmScheduler(config, services, identity.dp_rank, self.behaviour,
                                   identity.seed_offset)
        # Whether anything reads the occupancy snapshots (fit_readers).
        self.record_metrics = True
        # vLLM schedules one empty step after the one that finished its last request.
        self._trailing_step = False
        self.book = HandoffBook(VllmHandoffAdapter(self))
        self.sched.book = self.book
        self.pass_counter = 0
        # The queue statistics and FpmRun.base of the last run's metrics (servesim_vllm.fast.runs).
        self.fpm_base: tuple[tuple[int, ...], dict[str, Any]] | None = None
        self.prefilled = False
        self.worked = False
        self.speedup = config.speedup_ratio
        self.decode_speedup = config.decode_speedup
        # Requests the engine-core loop has not read (servesim_vllm.async_scheduling), or None.
        self.unread = AsyncScheduling.build(backend_config)

    def fit_readers(self, readers: EventReaders) -> None:
        """What the replay's readers take (servesim.fast.event_readers.FitsReaders)."""
        if readers.kv_router_only:
            # Only the KV router reads the events: coalesce removals, and hash generated
            # pseudo-token blocks lazily as with events off (no prompt can match them, so the
            # router's overlaps are unchanged), publishing nothing for them.
            self.sched.pool.coalesce_removals = True
            self.sched.pool.events_for_placeholders = False
            self.sched.lazy_hashes = self.sched.caching
        # Every reader takes compact event records (servesim.kv.event_records).
        self.sched.pool.event_records = readers.kv_records
        self.record_metrics = readers.occupancy

    @classmethod
    def validate_config(cls, config: EngineConfig, backend_config: Any) -> list[tuple[str, str]]:
        problems = []
        if config.block_size is not None and config.block_size <= 0:
            problems.append(("engine.block_size", f"must be > 0, got {config.block_size}"))
        if config.num_gpu_blocks <= 0:
            problems.append(("engine.num_gpu_blocks", f"must be > 0, got {config.num_gpu_blocks}"))
        problems.extend(_behaviour.validate(backend_config))
        problems.extend(_host_problems(config))
        problems.extend(_priority_problems(config))
        problems.extend(_async_problems(config, backend_config))
        if config.enable_lora and config.native_host_offload is not None:
            # Both skip waiting requests within a pass; their joint order is not modelled.
            problems.append(("engine.enable_lora", "LoRA is not modelled with native_host_offload"))
        return problems

    # -- commands -------------------------------------------------------------------------

    def apply(self, command: Command, ctx: CommandContext, pending: Any | None) -> CommandEffects:
        if self.unread is not None:
            self.unread.now_ms = ctx.now_ms
        if isinstance(command, Submit):
            return self._submit(command)
        if isinstance(command, CancelRequest):
            return self._cancel(command, pending)
        return self._handoff(command, ctx, pending)

    def _handoff(
        self, command: Command, ctx: CommandContext, pending: VllmPendingPass | BlockRunPending | None
    ) -> CommandEffects:
        """The handoff commands (servesim.mechanics.handoff.HandoffBook; aisimulate-engine.md §8.2)."""
        if not isinstance(command, (ReserveDestination, ActivateDestination)):
            # The cancels change running requests. A reservation and an activation touch only
            # the pool, the waiting queue and the activated request itself, so a steady batch
            # (servesim_vllm.fast.steady) may stay: its members' counters are not read.
            _steady.sync(self.sched)
        book = self.book
        busy = ctx.pass_in_flight
        retained = pending.effects if pending is not None else None
        return book.apply(command, busy, retained)

    def _submit(self, command: Submit) -> CommandEffects:
        self.enqueue(command.request)
        return CommandEffects(CommandResult.submitted(command.request.request_id), metrics=self.metrics())

    def enqueue(self, request: Request) -> None:
        """``Submit``'s checks and queueing, without its effects (a handoff source's
        ``SubmitHandoffPrefill`` returns the book's)."""
        rid = request.request_id
        if rid in self.sched.requests or (self.unread is not None and self.unread.holds(rid)):
            raise CommandRejected(f"request {rid} is already active")
        if request.max_output_tokens < 0:
            raise CommandRejected(f"request {rid}: max_output_tokens must be >= 0")
        if len(request.prompt) == 0:
            raise CommandRejected(f"request {rid}: the prompt is empty (vLLM needs at least one token)")
        if self.unread is not None:
            self.unread.hold(request)
        else:
            self.sched.submit(request)

    def _cancel(
        self, command: CancelRequest, pending: VllmPendingPass | BlockRunPending | None
    ) -> CommandEffects:
        """Cancel a waiting or running request; mid-pass, also drop its retained outputs
        (aisimulate-engine.md §3, "Suppression")."""
        rid = command.request_id
        removed = (self.unread is not None and self.unread.drop(rid)) or self.sched.cancel(rid)
        removed = self.book.forget_request(rid) or removed
        retired: tuple[int, ...] = (rid,) if removed else ()
        suppressed = False
        if pending is not None and (removed or command.discard_pending_output):
            suppressed = suppress_request(pending.effects, rid)
            if suppressed and not removed:
                retired = (rid,)
        return CommandEffects(
            APPLIED if removed else NOOP,
            retired_requests=retired,
            metrics=self.metrics(),
            suppressed_pending_output=suppressed,
        )

    # -- readiness ------------------------------------------------------------------------

    def is_ready(self) -> bool:
        if self._trailing_step:
            return True
        s = self.sched
        return bool(s.running or s.waiting or (self.unread and self.unread.inbox)) or self.book.can_retry

    def preload_cache(self, paths: Sequence[WarmPath]) -> WarmLoad:
        """A warm start (servesim.rank.WarmCache): the paths become cached, unreferenced
        blocks of this rank's pool."""
        return preload_pool(self.sched.pool, paths)

    def is_drained(self) -> bool:
        if self._trailing_step or (self.unread is not None and self.unread.inbox):
            return False
        return not self.sched.requests and not self.book.holding

    def waiting_for_external_command(self) -> bool:
        return self.book.holding and head_blocked_externally(self.sched)

    def prefill_in_pass(self) -> bool:
        return self.prefilled

    def model_work_in_pass(self) -> bool:
        return self.worked

    # -- passes ---------------------------------------------------------------------------

    def execute_pass(self, now_ms: float) -> RankPass:
        if self.unread is not None:
            self.unread.read(self.sched, now_ms)
        res = self.sched.run_pass(now_ms)
        self._note_trailing_step(len(res.completed) > len(res.rejected))
        worker = self.config.worker_type
        if self.sched.shapes is None:
            prefill_ms = 0.0 if worker is WorkerType.DECODE else res.prefill_ms
            # A prefill worker's first token comes out of the prefill forward (§7.2).
            decode_ms = 0.0 if worker is WorkerType.PREFILL else res.decode_ms
            end = now_ms + scaled_ms(prefill_ms, self.speedup) + scaled_ms(decode_ms, self.decode_speedup)
            self.prefilled = prefill_ms > 0
        else:
            duration, self.prefilled = shaped_pass_ms(self.sched, res)
            end = now_ms + duration
        if self.sched.lora is not None:  # adapter loads and overhead (servesim_vllm.lora)
            end += self.sched.lora.pass_ms(res, self.services.timing, self.speedup)
        host = self.sched.host
        if host is not None and end == now_ms and not res.order and self.sched.waiting:
            # Every waiting request was skipped for a transfer in flight: nothing can run
            # before a host transfer ends (the reference advances such a stalled pass to the
            # next offload deadline).
            deadline = host.next_deadline()
            if deadline is not None and deadline > now_ms:
                end = deadline
        self.worked = bool(res.order)
        outputs = OutputBatch(
            token_request_ids=res.token_rids,
            completed=res.completed,
            rejected=res.rejected,
            cached_tokens=res.cached_tokens,
        )
        effects = PassCompletionEffects(outputs=outputs, kv_events=self.sched.pool.drain_events())
        if self.sched.spec is not None:
            effects.decode_acceptance = self.sched.spec.sampler.tally.take()
        if self.book.events:
            effects.lifecycle_events = self.book.drain_events()  # SourceHeld (§4.8)
        fpm = self.fpm_tuple(res) if self.services.emit_forward_pass_metrics else None
        if self.services.record_schedule:
            effects.schedule = self._record(res)
        self.pass_counter += 1
        start = PassStartEffects(tuple(res.admissions), tuple(res.pressure))
        return RankPass(end, start, VllmPendingPass(now_ms, effects, fpm))

    def complete_pass(self, pending: VllmPendingPass, end_ms: float) -> PassCompletionEffects:
        effects = pending.effects
        if self.unread is not None:
            self.unread.pass_ends(end_ms)
        self.book.at_pass_boundary(effects)
        if self.sched.host is not None:
            self.sched.host.at_boundary(end_ms)
        effects.kv_events.extend(self.sched.pool.drain_events())
        effects.metrics = self.metrics()
        if pending.fpm_fields is not None:
            # The tuple holds every field but the last (_FPM_ORDER), which mypy cannot see.
            effects.forward_pass_metrics = ForwardPassMetrics(  # type: ignore[misc]
                *pending.fpm_fields, duration_ms=max(0.0, end_ms - pending.started_at_ms))
        return effects

    # Runs may continue through completions when the driver can take them mid-run.
    runs_through_completions: ClassVar[bool] = True

    def execute_run(self, now_ms: float, horizon_ms: float, max_passes: int,
                    through_completions: bool = False) -> RankRun | None:
        """A run of steady decode passes (servesim_vllm.fast.runs), or None to step: with
        ``execute_pass`` stepping the reference pass (servesim_vllm.scheduler), this is the
        rank's entry to the fast paths (docs/architecture.md)."""
        if self._runs_declined():
            return None
        run = _runs.execute_run(self, now_ms, horizon_ms, max_passes, through_completions)
        if run is not None:
            # nothing is left running only if the run's last pass finished it
            self._note_trailing_step(True)
        return run

    def extend_run(self, pending: _runs.VllmRunPending, now_ms: float, horizon_ms: float,
                   max_passes: int, through_completions: bool = False
                   ) -> tuple[list[float], list[tuple[int, int]]] | None:
        """More passes for the in-flight run at its last boundary: their ends and their
        completions before the last one (servesim_vllm.fast.runs.extend_run;
        servesim.engine.Engine.extend_run)."""
        if self._runs_declined():
            return None
        more = _runs.extend_run(self, pending, now_ms, horizon_ms, max_passes,
                                through_completions)
        if more is not None:
            self._note_trailing_step(True)  # as execute_run
        return more

    def _runs_declined(self) -> bool:
        """Whether this rank steps every pass: a record eviction policy needs every step; a
        run's passes emit one token per member (bursts need stepping) and prepare no host
        stores nor see host transfers complete."""
        s = self.sched
        return (s.pool.steps_only or s.spec is not None or s.host is not None or s.lora is not None
                or bool(self.unread and self.unread.inbox))

    def _note_trailing_step(self, finished: bool) -> None:
        """After a pass that finished requests and left nothing running or waiting, vLLM 0.32
        runs one more, empty step (``trailing_empty_step``, docs/conformance.md)."""
        s = self.sched
        self._trailing_step = (
            self.behaviour.trailing_empty_step and finished and not (s.running or s.waiting)
        )

    def complete_run(self, pending: _runs.VllmRunPending, end_ms: float) -> RunEffects:
        if self.unread is not None:
            self.unread.run_ends(pending.started_at_ms, pending.ends)
        return _runs.complete_run(self, pending, end_ms)

    def take_run_kv_events(
        self, pending: _runs.VllmRunPending, before_pass: int
    ) -> dict[int, list[KvEvent]]:
        return _runs.take_kv_events(pending, before_pass)

    def complete_idle_group_pass(
        self, started_at_ms: float, end_ms: float
    ) -> PassCompletionEffects | None:
        effects = PassCompletionEffects()
        self.book.at_pass_boundary(effects)
        effects.kv_events = self.sched.pool.drain_events()
        effects.metrics = self.metrics()
        effects.forward_pass_metrics = self.idle_forward_pass_metrics(started_at_ms, end_ms)
        return effects


    # -- internal work (host offload) ----------------------------------------------------

    @property
    def internal_deadlines(self) -> bool:
        """Whether this rank can have internal deadlines (only with a host tier)."""
        return self.sched.host is not None

    @property
    def host_tier(self) -> HostTier | None:
        """The rank's host KV tier (servesim.kv.host_tier.HostTier), or None."""
        return self.sched.host.tier if self.sched.host is not None else None

    @property
    def lora_cache(self) -> AdapterCache | None:
        """The rank's LoRA adapter cache (servesim.mechanics.lora.AdapterCache), or None."""
        return self.sched.lora.cache if self.sched.lora is not None else None

    def next_internal_deadline_ms(self) -> float | None:
        host = self.sched.host
        return host.next_deadline() if host is not None else None

    def process_internal_work(self, now_ms: float, pass_in_flight: bool) -> PassStartEffects:
        host = self.sched.host
        if host is None or pass_in_flight:
            # A transfer due during a forward pass waits for the pass boundary.
            return PassStartEffects()
        host.advance(now_ms)
        return PassStartEffects(kv_events=tuple(self.sched.pool.drain_events()))

    # -- observability --------------------------------------------------------------------

    def metrics(self) -> Metrics | None:
        if not self.record_metrics:
            return None
        s = self.sched
        pool = s.pool
        return Metrics(
            dp_rank=self.identity.dp_rank,
            active_blocks=pool.num_active,
            inactive_blocks=pool.num_inactive,
            total_blocks=pool.capacity,
            running_requests=len(s.running),
            waiting_requests=len(s.waiting),
            preemptions_total=s.preemptions_total,
        )

    def fpm_tuple(self, res: PassResult) -> tuple[Any, ...]:
        """dynamo-mocker.md §4.5: scheduled prefills and decodes, queued prefills and
        (preempted) decodes, population variances; ``duration_ms`` is set at completion.
        The fields but the duration, in ``_FPM_ORDER``; the prefill lengths' variance is
        :class:`servesim.mechanics.numeric.Welford`'s, its operations inlined in the same order."""
        n = 0
        mean = m2 = 0.0
        pre_tokens = pre_kv = 0
        for w in res.work.values():
            if w.prompt_tokens > 0:
                x = w.req.prompt_len
                n += 1
                d = x - mean
                mean += d / n
                m2 += d * (x - mean)
                pre_tokens += w.tokens
                pre_kv += w.prefix_tokens
        dn, dsum, dsq = res.decode_stats
        qp = self.sched.queued_prefill
        qd = self.sched.queued_decode
        if self.book.dests:  # pending and reserved destinations queue as decodes (§4.9)
            qd = [a + b for a, b in zip(qd, self.book.unactivated_prompt_stats(), strict=True)]
        identity = self.identity
        return (
            identity.worker_id, identity.dp_rank, self.pass_counter,
            n, pre_tokens, m2 / n if n > 1 else 0.0, pre_kv,
            dn, dsum, _population_variance(dn, dsum, dsq),
            qp[0], qp[1], _population_variance(*qp),
            qd[0], qd[1], _population_variance(*qd),
        )

    def _record(self, res: PassResult) -> ScheduleRecord:
        s = self.sched
        done = set(res.completed) - set(res.rejected)
        return ScheduleRecord(
            scheduled={r.rid: (res.work[r.rid].tokens if r.rid in res.work else 1)
                       for r in res.order},
            new_hits=dict(res.new_hits),
            resumed=list(res.resumed),
            preempted=[p.request_id for p in res.pressure],
            finished=[rid for rid in res.completed if rid in done],
            running=len(s.running),
            waiting=len(s.waiting),
            free_blocks=s.pool.num_free + s.pool.num_inactive,
        )


def _host_problems(config: EngineConfig) -> list[tuple[str, str]]:
    """aisimulate-engine.md §5.4: the native host tier models one aggregated vLLM rank with
    prefix caching, without speculative decoding, with known KV bytes per token."""
    if config.native_host_offload is None:
        return []
    key = "engine.native_host_offload"
    problems = []
    if config.worker_type is not WorkerType.AGGREGATED:
        problems.append((key, "needs an aggregated worker (not a prefill or decode role)"))
    if config.dp_size != 1:
        problems.append((key, f"needs dp_size 1, got {config.dp_size}"))
    if not config.enable_prefix_caching:
        problems.append((key, "needs enable_prefix_caching: true"))
    if config.aic_nextn is not None:
        problems.append((key, "cannot be combined with aic_nextn"))
    if kv_bytes_per_token(config) is None:
        problems.append((key, "needs engine.kv_bytes_per_token (or num_layers, num_kv_heads "
                              "and head_dim) for the bytes per block"))
    return problems


def _population_variance(n: int, total: int, sum_sq: int) -> float:
    """Population variance from integer sums (exact for the integer lengths involved);
    0 for fewer than two samples, like the reference's Welford accumulators."""
    if n < 2:
        return 0.0
    return max(0.0, (sum_sq * n - total * total) / (n * n))


__all__ = ["VllmPendingPass", "VllmRank"]
