"""Runs of steady decode passes for the ``vllm`` rank (servesim.fast.runs; docs/architecture.md, "Speed by design").

A pass is *steady* when the waiting queue is empty and every running request is a plain
decode step (its prompt is done and one sampled token is left to compute): the scheduler then
schedules exactly the running list, in order, one token each, and every request samples one
token. Such a batch changes only where the rank can foresee it:

* a request crosses a block boundary — its pre-pass length ``L`` has ``L % bs == 1`` (it needs
  a new block: :meth:`BlockPool.allocate`, which may evict an inactive block and publish a
  ``Removed`` event) or ``L % bs == 0`` (a block becomes full: :meth:`BlockPool.finalize`
  publishes ``Stored``). These are replayed at their pass, in batch order, with the same pool
  calls as stepping, so KV events and block ids are identical. An allocation that could fail
  (fewer free-or-evictable blocks than the pass needs) ends the run *before* that pass;
  stepping then preempts exactly as it would have;
* a request reaches its output length — the run ends *with* that pass, whose completions
  release blocks after the pass's allocations, as ``_emit`` does after ``_schedule_running``.
  With ``through_completions`` (the driver can take completions mid-run) and an empty waiting
  queue, a completion enables nothing, so the run continues: the request's blocks are released
  at its pass (after that pass's allocations, before the next pass's) and the later passes are
  priced without it (the batch is split into segments between completions).

Pass ``j``'s decode time uses the same call and float operations as stepping:
``predict_decode_ms(m, S + j*m, (S + j*m) // m, total)`` with ``S`` the batch's summed
pre-run length, and ``end = start + scaled_ms(0.0, speedup) + scaled_ms(decode, decode_speedup)``,
so boundaries are bit-identical (including the nanosecond rounding of ``scaled_ms``).

The batch is held as a :class:`servesim_vllm.fast.steady.VllmSteadyBatch`: a run visits only the
members whose block steps or completions fall inside it (a heap of next block steps, buckets
of completion passes), so its cost does not grow with the batch, and the members' own counters
are written back only when something other than runs and steady passes needs them.

A decode worker of a disaggregated replay runs too while its handoff book holds only
activated destinations (``HandoffBook.only_active``; they decode like any request); the
book's boundary work then happens at the run's end (``HandoffBook.at_run_end``), whose
lifecycle events are the last pass's. Runs are declined (stepping is used) for anything
else: a prefill worker, other handoff state, schedule recording, a batch larger than the
token budget, and any running request whose prompt plus output could outgrow the whole pool
(it could later be rejected on readmission, which the driver's run statistics do not model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from servesim.contract import (
    Admission,
    KvEvent,
    OutputBatch,
    WorkerType,
)
from servesim.fast.fpm_runs import FpmRun
from servesim.fast.runs import (
    BlockRunPending,
    RankRun,
    RunEffects,
    price_decode_chunks,
    take_run_kv_events,
)
from servesim.fast.steady import plan_passes, replay_steps
from servesim.timing.base import scaled_ms
from servesim.timing.builtin import PolynomialTiming

from servesim_vllm.fast.steady import SteadyScheduler, VllmSteadyBatch, pass_steps
from servesim_vllm.request import Status

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.contract import Metrics
    from servesim.mechanics.handoff import HandoffBook
    from servesim.rank import RankIdentity, RankServices

    from servesim_vllm.request import VllmRequest


class RunRank(Protocol):
    """A ``VllmRank`` (servesim_vllm.rank) as its runs see it: the scheduler, the rank's
    configuration, and the per-pass state a run advances by its ``k`` passes."""

    identity: RankIdentity
    config: EngineConfig
    services: RankServices
    book: HandoffBook
    decode_speedup: float
    record_metrics: bool  # something reads occupancy snapshots (EventReaders.occupancy)
    # pass number of the next forward-pass metrics line (ForwardPassMetrics.counter_id)
    pass_counter: int
    # the queue statistics and FpmRun.base of the last run's metrics (run_fpm_base)
    fpm_base: tuple[tuple[int, ...], dict[str, Any]] | None
    prefilled: bool  # the last pass prefilled (Rank.prefill_in_pass)
    worked: bool  # the last pass ran the model (Rank.model_work_in_pass)

    @property
    def sched(self) -> SteadyScheduler: ...

    def metrics(self) -> Metrics | None: ...


VllmRunPending = BlockRunPending



def _steady_batch(rank: RunRank) -> tuple[VllmSteadyBatch, list[VllmRequest]] | None:
    """The running batch as a :class:`VllmSteadyBatch` (the one a run or steady pass left in
    ``steady``, else built from the requests: one loop over the batch) and the activated
    destinations the run's first pass admits (:func:`_remote_admissions`), or None when the
    next pass would not be a plain decode of every running request."""
    s = rank.sched
    if rank.config.worker_type is WorkerType.PREFILL:
        return None  # one token per request: never a steady decode batch
    if s.cadence is not None:  # its step counters advance pass by pass: step
        return None
    if s.by_priority is not None:  # the priority policy (servesim_vllm.priority) steps
        return None
    admit: list[VllmRequest] = []
    if s.waiting:
        remote = _remote_admissions(s)
        if remote is None:
            if not _admission_blocked(s):
                return None
        else:
            admit = remote
    if rank.services.record_schedule:
        return None
    book = getattr(rank, "book", None)
    if book is not None and not book.only_active:
        return None  # activated destinations decode like any request (HandoffBook.at_run_end)
    running = s.running
    m = len(running)
    if m + len(admit) == 0 or m + len(admit) > s.max_tokens:
        return None
    batch = s.steady
    if batch is not None:
        if batch.running is not running or batch.m != m:
            raise RuntimeError("vllm rank: the steady batch lost track of the running list")
        return batch, admit
    if m:
        tail = running[-1]
        if tail.computed != tail.length - 1 or not tail.generated:
            return None  # the newest member (a just-admitted request) is still prefilling
    # Without vLLM's null block when set.
    built = VllmSteadyBatch.build(running, s.bs, s.usable_blocks * s.bs)
    if built is None:
        return None
    s.steady = built  # exact even if no run follows: nothing advanced yet
    return built, admit


def _remote_admissions(s: Any) -> list[VllmRequest] | None:
    """The waiting requests when every one is an activated destination that the next pass's
    ``_admit_waiting`` admits (``admit_remote``) and that is a plain decoder from then on;
    None otherwise. Such a request needs no block and no prefill: its prompt KV is resident
    (reserved and finalised by the handoff), so in the pass that admits it it samples its
    first token like a steady member of length ``prompt_len`` (priced by the decode call,
    counted as a decode by the forward-pass metrics), and its block step there is empty."""
    waiting = s.waiting
    m = len(s.running)
    if m >= s.max_tokens or m + len(waiting) > s.max_seqs:
        return None  # the budget or max_num_seqs stops the admissions part-way
    if s.spec is not None:
        return None
    bs = s.bs
    limit = s.usable_blocks * bs
    caching = s.caching
    for req in waiting:
        if req.status is not Status.REMOTE:
            return None
        plen = req.prompt_len
        if (req.computed != plen or req.length != plen or req.generated or req.max_out < 1
                or plen + req.max_out > limit or req.cached_signaled
                or -(-plen // bs) != len(req.table.ids)
                or (caching and plen // bs > req.table.num_cached)):
            return None
    return list(waiting)


# Passes priced one by one before switching to numpy chunks (both bit-identical): most runs
# end within a few passes, where numpy's per-call overhead would dominate.
_VECTOR_MIN = 16


def _admission_blocked(s: Any) -> bool:
    """Whether ``_admit_waiting`` admits (or rejects) nothing in any pass of a steady run.

    It starts only below ``max_num_seqs`` (the running count is fixed until the last pass's
    completions, which come after admission). Then the head of the queue must be held back
    by the free-block check: its need is fixed during a run (its cached prefix can only lose
    *inactive* blocks to eviction, and generated blocks never match a prompt) while active
    blocks only grow, so a head blocked now stays blocked. Anything else (a head that would
    be rejected, a handoff destination) declines the run.
    """
    if len(s.running) >= s.max_seqs:
        return True
    req = s.waiting[0]
    if req.status is not Status.WAITING and req.status is not Status.PREEMPTED:
        return False
    if not s.beh.scheduler_reserve_full_isl:
        return False  # only the first chunk must fit: not foreseeable here
    if s.impossible(req):  # the scheduler's own admission rules
        return False
    _cached, active_cached = s.prefill_cost(req)
    needed = -(-req.length // s.bs) - active_cached // s.bs
    return needed > s.usable_blocks - s.pool.num_active


def execute_run(rank: RunRank, now: float, horizon: float, max_passes: int,
                through_completions: bool = False) -> RankRun | None:
    found = _steady_batch(rank)
    if found is None:
        return None
    batch, admit = found
    s = rank.sched
    if admit:
        batch.add(admit)  # they join at this pass (taken back below when no run follows)

    def price(start: float, total: int, m: int, j0: int, j1: int, ends: list[float]) -> bool:
        return _pass_ends(rank, start, horizon, total, m, j0, j1, ends)

    # Nothing waits once the first pass admitted the activated destinations.
    ends, segments = plan_passes(batch, now, max_passes,
                                 through_completions and (not s.waiting or bool(admit)), price)
    run = VllmRunPending(now)
    run.record_occupancy = rank.record_metrics  # read only for pass metrics
    members = batch.rids
    k, finished = _replay_crossings(rank, run, batch, len(ends))
    if k == 0:
        if admit:
            # Nothing advanced; the admitted requests are still waiting: keep no batch.
            s.steady = None
            batch.write_back(s.running)
        return None
    del ends[k:]
    run.ends = ends
    run.segments = [seg for seg in segments if seg[0] < k]
    admissions = _admit(s, run, admit) if admit else ()
    completed_at = _commit(rank, run, batch, k, members, finished)
    return RankRun(now, tuple(ends), run, completed_at, tuple(members), admissions)


def _admit(s: Any, run: VllmRunPending, admit: list[VllmRequest]) -> tuple[Admission, ...]:
    """What ``admit_remote`` and ``_emit`` do to the requests the run's first pass admits
    (their length and tokens live in the batch from now on)."""
    for req in admit:
        s.waiting.remove(req)
        s.queue_stats(req, -1)
        req.status = Status.RUNNING
        s.running.append(req)
        req.cached_prefix = 0
        req.cached_signaled = True
        run.cached_tokens[req.rid] = 0
    return tuple(Admission(req.rid, 0) for req in admit)


def _pass_ends(rank: RunRank, now: float, horizon: float, total: int, m: int,
               j0: int, kmax: int, ends: list[float]) -> bool:
    """Append to ``ends`` the ends of passes ``j0 .. kmax-1`` (pass ``j0`` starting at
    ``now``) that start before ``horizon``; True when it stopped early (at ``horizon`` or
    after a zero-duration pass). Pass j prices ``m`` decoders of summed length ``total + j*m`` with
    stepping's expression ``start + scaled_ms(0.0) + scaled_ms(decode)``; the numpy chunks
    use the same IEEE operations (``predict_decode_ms_many``, ``scaled_ms_many``, and a
    left-to-right ``cumsum`` of the durations, valid because the first term is exactly 0.0)."""
    s = rank.sched
    timing = s.timing
    kv_total = s.cfg.num_gpu_blocks * s.bs
    zero = 0.0  # scaled_ms(0.0, rank.speedup): no division, and 0.0 rounds to 0.0
    dsp = rank.decode_speedup
    start = now
    j = j0
    limit = kmax if zero else min(kmax, j0 + _VECTOR_MIN)
    predict = timing.predict_decode_ms
    poly = _decode_polynomial(timing, m, kv_total)
    da, db, dc = poly if poly is not None else (0.0, 0.0, 0.0)
    inf = float("inf")
    while j < limit:
        kv = total + j * m
        if poly is None:
            raw = predict(m, kv, kv // m, kv_total)
        else:  # PolynomialTiming.predict_decode_ms inlined, the same operations in order
            u = kv / kv_total
            if u > 1.0:
                u = 1.0
            raw = da * u * u + db * u + dc
            if not raw > 1.0:
                raw = 1.0
        # scaled_ms(raw, dsp) inlined, same operations: this loop is the per-pass cost.
        if not (raw >= 0.0 and raw != inf):
            scaled_ms(raw, dsp)  # raises the usual error
        if dsp > 0 and raw > 0:
            raw = raw / dsp
        end = start + zero + round(raw * 1e6) / 1e6
        ends.append(end)
        j += 1
        if end == start or end >= horizon:
            return True
        start = end
    return price_decode_chunks(timing, m, total, kv_total, dsp, j, kmax, start, horizon, ends)


def _decode_polynomial(timing: Any, m: int, kv_total: int) -> tuple[float, float, float] | None:
    """The decode coefficients when ``timing.predict_decode_ms(m, kv, _, kv_total)`` is
    exactly the built-in polynomial's ``max(1, da u² + db u + dc)`` with ``u = min(kv /
    kv_total, 1)`` (the class itself, not a subclass; a batch and a pool that are not
    empty), for :func:`_pass_ends` to evaluate without a call per pass; else None."""
    if type(timing) is not PolynomialTiming or m <= 0 or kv_total <= 0:
        return None
    return timing.da, timing.db, timing.dc


def _replay_crossings(rank: RunRank, run: VllmRunPending, batch: VllmSteadyBatch,
                      k: int) -> tuple[int, list[tuple[int, list[VllmRequest]]]]:
    """Apply the block steps of passes ``< k`` in (pass, batch) order, then each pass's
    completions (releases, in batch order, as _emit after _schedule_running), draining KV
    events per pass (servesim.fast.steady.replay_steps). Returns the passes kept (fewer when an
    allocation could fail at some pass: stepping must decide, preempting) and
    ``(pass, requests)`` of the completions in them, which have left the batch."""
    s = rank.sched
    pool = s.pool

    def leave(done: list[VllmRequest], p: int) -> None:
        for req in done:
            pool.release(req.table)

    return replay_steps(batch, run, pool, k, *pass_steps(s), leave)


def _finish(rank: RunRank, batch: VllmSteadyBatch, k: int,
            finished: list[tuple[int, list[VllmRequest]]]
            ) -> tuple[list[int], list[tuple[int, int]]]:
    """Advance the batch and the rank's pass count by ``k`` passes and finish the requests
    that completed in them (their blocks were released at their pass). Returns the ids
    completed at the last pass and the earlier completions as ``(pass, request id)``."""
    s = rank.sched
    completed: list[int] = []
    completed_at: list[tuple[int, int]] = []
    batch.P += k
    if finished:
        for j, done in finished:
            last = j == k - 1
            for req in done:
                rid = req.rid
                batch.write(req, req.sb + req.se, 0)
                req.status = Status.FINISHED
                del s.requests[rid]
                if last:
                    completed.append(rid)
                else:
                    completed_at.append((j, rid))
        # In place, few at a time: the batch keeps the running list.
        running = s.running
        for _j, done in finished:
            for req in done:
                running.remove(req)
    rank.pass_counter += k
    rank.prefilled = False
    rank.worked = True
    return completed, completed_at


def _commit(rank: RunRank, run: VllmRunPending, batch: VllmSteadyBatch, k: int,
            members: list[int], finished: list[tuple[int, list[VllmRequest]]]
            ) -> tuple[tuple[int, int], ...]:
    """Commit the run's ``k`` passes: :func:`_finish` the requests that completed in them (the
    others advance only in the batch, servesim_vllm.fast.steady) and file the members in ``run``.
    Returns the completions before the last pass as ``(pass, request id)``."""
    s = rank.sched
    run.counter0 = rank.pass_counter  # before _finish counts the passes
    completed, completed_at = _finish(rank, batch, k, finished)
    run.set_members(members, completed, completed_at)
    run.queued = len(s.waiting)
    if rank.services.emit_forward_pass_metrics:
        run.fpm_fields = run_fpm_base(rank, s.queued_prefill, s.queued_decode)
    return tuple(completed_at)


def extend_run(rank: RunRank, run: VllmRunPending, now: float, horizon: float,
               max_passes: int, through_completions: bool = False
               ) -> tuple[list[float], list[tuple[int, int]]] | None:
    """More passes for the committed run ``run`` at its last boundary ``now`` (no command
    reached the rank since it was committed: servesim.engine.Engine.extend_run): exactly
    the passes :meth:`VllmRank.execute_run` would commit after ``complete_run``, appended
    to ``run``, whose ``complete_run`` then releases them all as one run. Returns the new
    passes' ends and their completions before the last pass, ``(pass, request id)`` with
    pass indices from 0 (as ``RankRun.completed_at``), or None (nothing changed).

    Declined when completing ``run`` would have done anything the new passes could see: a
    completion at its last pass (the book's ``at_run_end`` and the batch's trailing step
    come after it), an activated destination waiting for admission (a new run admits it in
    its first pass); and, to keep the per-pass records simple, when the run keeps
    forward-pass metrics or occupancy snapshots or the pool publishes KV events (a
    disaggregated replay with sinks or a timeline steps anyway). ``run.segments`` then stay
    those of its first passes: only forward-pass metrics read them."""
    if (run.effects.outputs.completed or run.fpm_fields is not None or run.record_occupancy
            or not run.ends or run.ends[-1] != now):
        return None
    s = rank.sched
    if s.pool.events_enabled:
        return None  # its events would need filing under their pass of the whole run
    found = _steady_batch(rank)
    if found is None or found[1]:
        return None  # (found[1]: activated destinations to admit; nothing was changed)
    batch = found[0]

    def price(start: float, total: int, m: int, j0: int, j1: int, ends: list[float]) -> bool:
        return _pass_ends(rank, start, horizon, total, m, j0, j1, ends)

    ends, _segments = plan_passes(batch, now, max_passes,
                                  through_completions and not s.waiting, price)
    # No pool events and no occupancy records: replay_steps files nothing in ``run``.
    k, finished = _replay_crossings(rank, run, batch, len(ends))
    if k == 0:
        return None
    del ends[k:]
    k0 = len(run.ends)
    run.ends.extend(ends)
    completed_at = _commit_more(rank, run, batch, k, k0, finished)
    return ends, completed_at


def _commit_more(rank: RunRank, run: VllmRunPending, batch: VllmSteadyBatch, k: int,
                 k0: int, finished: list[tuple[int, list[VllmRequest]]]
                 ) -> list[tuple[int, int]]:
    """:func:`_commit` for ``k`` passes appended to ``run`` after its ``k0`` first ones:
    the same changes to the batch, the scheduler and the rank; the completions filed in
    ``run`` at their pass of the whole run, its last pass's outputs replaced."""
    s = rank.sched
    completed, completed_at = _finish(rank, batch, k, finished)
    emitters = run.last_emitters
    if completed_at:
        emitters = emitters[:]
        before = run.completed_before
        for j, rid in completed_at:
            emitters.remove(rid)
            before.setdefault(j + k0, []).append(rid)
        run.departures = [(j, len(rids)) for j, rids in sorted(before.items())]
    run.last_emitters = emitters
    run.effects.outputs = OutputBatch(token_request_ids=list(emitters), completed=completed)
    run.queued = len(s.waiting)
    return completed_at


def take_kv_events(run: VllmRunPending, before_pass: int) -> dict[int, list[KvEvent]]:
    return take_run_kv_events(run.kv_events, before_pass)


def complete_run(rank: RunRank, run: VllmRunPending, end_ms: float) -> RunEffects:
    k = len(run.ends)
    last = run.effects
    # The handoff book's boundary work (its retry may allocate: before the events and the
    # metrics, as complete_pass does).
    lifecycle = []
    book = rank.book
    if book.dests:
        done = [rid for j in sorted(run.completed_before) for rid in run.completed_before[j]]
        done.extend(last.outputs.completed)
        lifecycle = book.at_run_end(done)
    # Events published by commands applied during the last pass belong to it (as stepping's
    # complete_pass drains them).
    run.take_events(rank.sched.pool, k - 1)
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
        pass_metrics_factory=pass_metrics, completed_before=run.completed_before,
        lifecycle_events=lifecycle, cached_tokens=run.cached_tokens,
    )
    if run.fpm_fields is not None:
        effects.forward_pass_metrics = fpms(run, end_ms)
    return effects


def run_fpm_base(rank: RunRank, qp: list[int], qd: list[int]) -> dict[str, Any]:
    """The fields every pass of a run shares (``FpmRun.base``): no prefill, the unchanged
    queues. Runs of a rank share them while its queues stay put, so the rank keeps the last
    dict and hands it on again (it is never changed once built)."""
    key = (qp[0], qp[1], qp[2], qd[0], qd[1], qd[2])
    cached = rank.fpm_base
    if cached is not None and cached[0] == key:
        return cached[1]
    base = dict(
        worker_id=rank.identity.worker_id, dp_rank=rank.identity.dp_rank,
        num_queued_prefill=qp[0], sum_queued_prefill_tokens=qp[1],
        var_queued_prefill_length=pop_var(*qp), num_queued_decode=qd[0],
        sum_queued_decode_kv_tokens=qd[1], var_queued_decode_kv_tokens=pop_var(*qd),
        num_prefill_requests=0, sum_prefill_tokens=0, var_prefill_length=0.0,
        sum_prefill_kv_tokens=0,
    )
    rank.fpm_base = (key, base)
    return base


def fpms(run: VllmRunPending, end_ms: float) -> FpmRun:
    """dynamo-mocker.md §4.5 for a steady pass: no prefill, ``m`` decodes of the pass's
    lengths (population variance from integer sums), the unchanged queues.

    Built a segment at a time: in a segment of ``m`` decoders whose summed pre-run lengths
    and squares are ``total`` and ``sq``, pass ``j`` sums ``kv_j = total + j*m`` and
    ``sq_j = sq + 2*j*total + j*j*m``, so ``sq_j*m - kv_j**2 == sq*m - total**2`` exactly
    (Python ints): the variance is the segment's constant and ``kv_j`` a ``range``."""
    fields = run.fpm_fields
    assert fields is not None
    ends = run.ends
    k = len(ends)
    segments = run.segments
    start = run.started_at_ms
    # Pass j lasts from the previous end (the run's start for the first) to its end, the
    # last to ``end_ms``; ``max(0.0, d)`` is ``d`` when ``d > 0.0``, else ``0.0``.
    if len(segments) == 1:  # most runs: no completion before the last pass
        _j0, total, sq, m = segments[0]
        if k == 1:
            d = end_ms - start
            return FpmRun(fields, run.counter0, [m], [total], [pop_var(m, total, sq)],
                          [d if d > 0.0 else 0.0])
        nums = [m] * k
        kvs = list(range(total, total + k * m, m)) if m > 0 else [total + j * m for j in range(k)]
        variances = [pop_var(m, total, sq)] * k
    else:
        nums, kvs, variances = [], [], []
        j0 = 0  # pass j takes the last segment that starts at or before it
        for i, (_s0, total, sq, m) in enumerate(segments):
            j1 = segments[i + 1][0] if i + 1 < len(segments) else k
            if j1 > k:
                j1 = k
            if j1 <= j0:
                continue
            nums += [m] * (j1 - j0)
            kvs += (range(total + j0 * m, total + j1 * m, m) if m > 0
                    else [total + j * m for j in range(j0, j1)])
            variances += [pop_var(m, total, sq)] * (j1 - j0)
            j0 = j1
    durations: list[float] = []
    append = durations.append
    for end in ends:
        d = end - start
        append(d if d > 0.0 else 0.0)
        start = end
    if k:
        d = end_ms - (ends[-2] if k > 1 else run.started_at_ms)
        durations[-1] = d if d > 0.0 else 0.0
    return FpmRun(fields, run.counter0, nums, kvs, variances, durations)


def pop_var(n: int, total: int, sum_sq: int) -> float:
    if n < 2:
        return 0.0
    return max(0.0, (sum_sq * n - total * total) / (n * n))


__all__ = ["VllmRunPending", "complete_run", "execute_run", "extend_run", "take_kv_events"]
