"""Runs of steady decode passes for the ``trtllm`` rank (servesim.fast.runs; docs/architecture.md, "Speed by design").

A step is *steady* when every running request is a plain decode (its context is computed, its
newest sampled token is the one dangling token, it has output left) and the capacity policy
would schedule exactly the running list, in order, one token each:

* ``guaranteed_no_evict``: the batch fits the token budget, and admission adds nothing — the
  queue is empty, ``max_batch_size`` is reached, or the head is held back by the reservation
  check. ``available = (num_gpu_blocks − active) − reserved`` is invariant under decode
  allocations (each takes one reserved block), and the head's need can only grow (eviction
  shortens its cached prefix) unless a block finalised in the run is one of the head's prompt
  blocks: the run then ends with that pass;
* ``static_batch``: a running batch is never joined (the queue is not looked at), so any queue
  is fine; the batch must fit ``max_batch_size`` and the budget;
* ``max_utilization``: no request waits (the walk would otherwise reach it and try to start or
  pause), the batch fits ``max_batch_size`` and the budget, and every pass's new blocks fit
  the free-or-evictable blocks (the same check that keeps allocations from failing).

Such a batch changes only where the rank foresees it. A request's decode crosses a block
boundary when its target position needs a new block (:meth:`BlockPool.allocate`, which may
evict and publish ``Removed``) or fills one (finalisation publishes ``Stored``); these are
replayed at their pass with the same pool calls as stepping — interleaved in batch order for
GNE (:meth:`TrtCore.decode_step` finalises at once), allocations first and then finalisations
for the native policies (:meth:`TrtCore.flush_finalize`) — so KV events and block ids are
identical. A pass whose allocations could fail ends the run before it. A request reaching its
output length ends the run with that pass — or, when the driver can take completions mid-run
(``through_completions``) and a completion enables nothing (no queue; for the static batch,
members remain), the run continues: the request is removed at its pass (after that pass's
block steps, as ``TrtCore.emit`` after scheduling) and later passes are priced without it, one
segment between completions.

Pass ``j`` is priced as stepping prices it: ``start + decode`` with
``decode = scaled_ms(predict_decode_ms(m, S + j*m, (S + j*m) // m, capacity), decode_speedup)``
(the prefill term is exactly 0.0), numpy chunks for long runs (bit-identical).

The batch is held as a :class:`servesim_trtllm.fast.steady.TrtSteadyBatch`: a run visits only the
members whose block steps or completions fall inside it, and the members' own counters are
written back only when something other than runs and steady steps needs them.

Declined (stepping is used): a non-aggregated worker, handoff state, schedule recording, any
request not in plain decode, and the queue conditions above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from servesim.contract import ForwardPassMetrics, KvEvent, WorkerType
from servesim.fast.runs import (
    BlockRunPending,
    RankRun,
    RunEffects,
    price_decode_chunks,
    take_run_kv_events,
)
from servesim.fast.steady import plan_passes, replay_steps
from servesim.mechanics.numeric import Welford
from servesim.timing.base import scaled_ms

from servesim_trtllm.config import CapacitySchedulerPolicy
from servesim_trtllm.fast.steady import SteadyCore, TrtSteadyBatch, is_plain_decode, pass_steps

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.contract import Metrics
    from servesim.mechanics.handoff import HandoffBook
    from servesim.rank import RankIdentity, RankServices

    from servesim_trtllm.handoff import TrtHandoffAdapter
    from servesim_trtllm.request import TrtRequest

_GNE = CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
_MU = CapacitySchedulerPolicy.MAX_UTILIZATION
# Passes priced one by one before switching to numpy chunks (both bit-identical): most runs
# end within a few passes, where numpy's per-call overhead would dominate.
_VECTOR_MIN = 16


TrtRunPending = BlockRunPending


class RunRank(Protocol):
    """A ``TrtllmRank`` (servesim_trtllm.rank) as its runs see it: the core, the rank's
    configuration, and the per-pass state a run advances by its ``k`` passes."""

    identity: RankIdentity
    config: EngineConfig
    services: RankServices
    policy: CapacitySchedulerPolicy
    handoff: TrtHandoffAdapter
    book: HandoffBook
    fpm_counter: int  # ForwardPassMetrics.counter_id of the last pass
    prefilled: bool  # the last pass prefilled (Rank.prefill_in_pass)
    model_work: bool  # the last pass ran the model (Rank.model_work_in_pass)
    # the (pool releases, requests) at which the rank found itself stalled, or None
    stalled: tuple[int, int] | None

    @property
    def core(self) -> SteadyCore: ...

    def metrics(self) -> Metrics | None: ...



def _head_watch(core: SteadyCore) -> set[int] | None | bool:
    """GNE only: False when admission could change the batch (decline), None when admission
    is not attempted or cannot succeed whatever the run finalises, else the sequence hashes
    of the head's full prompt blocks (a run finalising one of them must end there)."""
    if not core.waiting or len(core.running) >= _limit(core.limits.max_batch_size):
        return None
    head = next(iter(core.waiting.values()))
    if head.reject or head.total_blocks > core.num_blocks:
        return False
    available = core.reserved_available()
    if head.total_blocks <= available:
        return False  # admissible even without a prefix hit: no need to look it up
    needed, _, _ = core.fresh_blocks_needed(head)
    if needed <= available:
        return False
    n = head.seq_len // core.bs
    if head.total_blocks - n > available or not core.pool.prefix_caching or n == 0:
        return None  # blocked even if every full block were active
    seq, _ = head.hashes(n, core.bs)
    return set(seq[:n])


def _limit(value: int | None) -> float:
    return float("inf") if value is None else float(value)


def batch_order(rank: RunRank) -> dict[int, TrtRequest]:
    """The order a steady step schedules the running requests in: admission order, except
    under max_utilization, which walks the active list in submission order (``core.reqs``;
    a steady run there has an empty queue, so the two hold the same requests). They differ
    after a ``beneficialToSkip`` or a pause admitted a request out of submission order."""
    core = rank.core
    return core.reqs if rank.policy is _MU else core.running


def _steady(rank: RunRank) -> TrtSteadyBatch | None:
    """The running batch as a :class:`TrtSteadyBatch` (the one a run or steady step left in
    ``core.steady``, else built from the requests: one loop over the batch), or None when
    the next step is not steady."""
    core = rank.core
    if rank.config.worker_type is not WorkerType.AGGREGATED or rank.services.record_schedule:
        return None
    book = rank.book
    if book.sources or book.dests or book.events or book.holding or rank.handoff.activated:
        return None
    policy = rank.policy
    if policy is _MU and core.waiting:
        return None
    order = batch_order(rank)
    m = len(order)
    if m == 0 or m > _limit(core.limits.max_num_tokens):
        return None
    if policy is not _GNE and m > _limit(core.limits.max_batch_size):
        return None
    batch = core.steady
    if batch is not None:
        if batch.m != m:
            raise RuntimeError("trtllm rank: the steady batch lost track of the running requests")
        return batch
    members = list(order.values())
    for r in members:
        if not is_plain_decode(r):
            return None
    batch = TrtSteadyBatch(core.bs, core.pool.prefix_caching)
    batch.add(members)
    core.steady = batch  # exact even if no run follows: nothing advanced yet
    return batch


def execute_run(rank: RunRank, now: float, horizon: float, max_passes: int,
                through_completions: bool = False) -> RankRun | None:
    # The queue head first: an admissible head is the usual reason to step, and cheap to see.
    core = rank.core
    head = _head_watch(core) if rank.policy is _GNE else None
    if head is False:
        return None
    watch = head if isinstance(head, set) and head else None
    batch = _steady(rank)
    if batch is None:
        return None

    def price(start: float, total: int, m: int, j0: int, j1: int, ends: list[float]) -> bool:
        return _pass_ends(rank, start, horizon, total, m, j0, j1, ends)

    ends, segments = plan_passes(batch, now, max_passes,
                                 through_completions and _may_continue(rank), price)
    run = TrtRunPending(now)
    members = batch.rids
    k, finished = _replay_crossings(rank, run, batch, len(ends), watch)
    if k == 0:
        return None
    del ends[k:]
    run.ends = ends
    run.segments = [seg for seg in segments if seg[0] < k]
    completed_at = _commit(rank, run, batch, k, members, finished)
    return RankRun(now, tuple(ends), run, completed_at)


def _may_continue(rank: RunRank) -> bool:
    """Whether a completion inside a run leaves the next pass's batch to the remaining
    members: nothing waits (GNE would admit into the freed room; MU runs only with an empty
    queue), or the static batch, which is joined only once every member has completed."""
    return rank.policy is CapacitySchedulerPolicy.STATIC_BATCH or not rank.core.waiting


def _pass_ends(rank: RunRank, now: float, horizon: float, total: int, m: int,
               j0: int, kmax: int, ends: list[float]) -> bool:
    """Append the ends of passes ``j0 .. kmax-1`` (pass ``j0`` starting at ``now``) that start
    before ``horizon``; True when it stopped early (at ``horizon`` or after a zero-duration
    pass). Stepping's ``now + 0.0 + decode`` (adding 0.0 is exact); pass j prices ``m``
    decoders of summed length ``total + j*m``."""
    core = rank.core
    timing = core.timing
    capacity = core.capacity_tokens
    dsp = core.config.decode_speedup
    start = now
    j = j0
    limit = min(kmax, j0 + _VECTOR_MIN)
    predict = timing.predict_decode_ms
    while j < limit:
        kv = total + j * m
        end = start + scaled_ms(predict(m, kv, kv // m, capacity), dsp)
        ends.append(end)
        j += 1
        if end == start or end >= horizon:
            return True
        start = end
    return price_decode_chunks(timing, m, total, capacity, dsp, j, kmax, start, horizon, ends)


def _replay_crossings(rank: RunRank, run: TrtRunPending, batch: TrtSteadyBatch, k: int,
                      watch: set[int] | None) -> tuple[int, list[tuple[int, list[TrtRequest]]]]:
    """Apply the block steps of passes ``< k`` in (pass, batch) order, then each pass's
    completions (``TrtCore.remove`` in batch order, as ``emit`` after scheduling), draining KV
    events per pass (servesim.fast.steady.replay_steps). Returns the passes kept (fewer when an
    allocation could fail at some pass, or when a block it would finalise is one the
    held-back queue head could reuse: GNE admission, after the running requests in the same
    step, could then hit it, and stepping decides) and ``(pass, requests)`` of the
    completions in them, which have left the batch."""
    core = rank.core
    short, step = pass_steps(core)

    def blocked(due: list[TrtRequest], p: int) -> bool:
        return short(due, p) or bool(watch and _would_publish(core, due, p, watch))

    def leave(done: list[TrtRequest], p: int) -> None:
        for r in done:
            batch.write(r, r.sb + p + 1, 0)
            core.remove(r)

    return replay_steps(batch, run, core.pool, k, blocked, step, leave)


def _would_publish(core: SteadyCore, due: list[TrtRequest], P: int, watch: set[int]) -> bool:
    """Whether pass ``P`` would finalise a block whose sequence hash is in ``watch``
    (computing the hashes has no observable effect)."""
    bs = core.bs
    if not core.pool.prefix_caching:
        return False
    for r in due:
        target = r.sb + P
        if target % bs == 0:
            full = target // bs
            seq, _ = r.hashes(full, bs)
            if any(h in watch for h in seq[r.table.num_cached:full]):
                return True
    return False


def _commit(rank: RunRank, run: TrtRunPending, batch: TrtSteadyBatch, k: int,
            members: list[int], finished: list[tuple[int, list[TrtRequest]]]
            ) -> tuple[tuple[int, int], ...]:
    """Advance the batch by ``k`` passes (the members' own counters stay stale,
    servesim_trtllm.fast.steady; the completed ones were removed at their pass). Returns the
    completions before the last pass as ``(pass, request id)``, in stepping's order."""
    core = rank.core
    completed: list[int] = []
    completed_at: list[tuple[int, int]] = []
    batch.P += k
    for j, done in finished:
        for r in done:
            if j == k - 1:
                completed.append(r.rid)
            else:
                completed_at.append((j, r.rid))
    run.set_members(members, completed, completed_at)
    run.queued = len(core.waiting)
    run.counter0 = rank.fpm_counter
    rank.fpm_counter += k
    rank.prefilled = False
    rank.model_work = True
    rank.stalled = None
    if rank.services.emit_forward_pass_metrics:
        qp, qd = core.queued_prefill, core.queued_decode
        empty = Welford()
        run.fpm_fields = dict(
            worker_id=rank.identity.worker_id, dp_rank=rank.identity.dp_rank,
            num_prefill_requests=empty.n, sum_prefill_tokens=0,
            var_prefill_length=empty.variance(), sum_prefill_kv_tokens=0,
            num_queued_prefill=qp.n, sum_queued_prefill_tokens=qp.s1,
            var_queued_prefill_length=qp.variance(), num_queued_decode=qd.n,
            sum_queued_decode_kv_tokens=qd.s1, var_queued_decode_kv_tokens=qd.variance(),
        )
    return tuple(completed_at)


def take_kv_events(run: TrtRunPending, before_pass: int) -> dict[int, list[KvEvent]]:
    return take_run_kv_events(run.kv_events, before_pass)


def complete_run(rank: RunRank, run: TrtRunPending, end_ms: float) -> RunEffects:
    k = len(run.ends)
    core = rank.core
    pool = core.pool
    # Events published by commands applied during the last pass belong to it.
    run.take_events(pool, k - 1)
    last = run.effects
    tokens = last.outputs.token_request_ids
    absent: list[int] = []
    if len(tokens) != len(run.last_emitters):
        present = set(tokens)
        absent = [r for r in run.last_emitters if r not in present]
    # Stepping's complete_pass snapshot, taken now.
    pass_metrics = run.metrics_factory(rank.metrics())
    effects = RunEffects(
        started_at_ms=run.started_at_ms, pass_ends=run.ends, members=run.members,
        absent_last=absent, completed=list(last.outputs.completed), kv_events=run.kv_events,
        forward_pass_metrics=_fpms(run, end_ms) if run.fpm_fields is not None else None,
        completed_before=run.completed_before, pass_metrics_factory=pass_metrics,
    )
    return effects


def _fpms(run: TrtRunPending, end_ms: float) -> list[ForwardPassMetrics]:
    """The stepping path's FPM of a steady pass: the pass's ``m`` decodes (population variance
    from exact integer sums of the segment's lengths), no prefill, the unchanged queues."""
    fields = run.fpm_fields
    assert fields is not None
    out = []
    start = run.started_at_ms
    ends = run.ends
    k = len(ends)
    segments = run.segments
    for idx, (j0, total, sq, m) in enumerate(segments):
        j1 = segments[idx + 1][0] if idx + 1 < len(segments) else k
        for j in range(j0, min(j1, k)):
            end = end_ms if j == k - 1 else ends[j]
            s1 = total + j * m
            s2 = sq + 2 * j * total + j * j * m
            out.append(ForwardPassMetrics(
                **fields, counter_id=run.counter0 + j + 1, num_decode_requests=m,
                sum_decode_kv_tokens=s1,
                var_decode_kv_tokens=(m * s2 - s1 * s1) / (m * m) if m > 1 else 0.0,
                duration_ms=max(0.0, end - start),
            ))
            start = ends[j]
    return out


__all__ = ["TrtRunPending", "complete_run", "execute_run", "take_kv_events"]
