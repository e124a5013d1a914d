"""Runs of steady decode passes for the ``trtllm`` rank (servesim.runs; DESIGN.md §7).

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

Declined (stepping is used): a non-aggregated worker, handoff state, schedule recording, any
request not in plain decode, and the queue conditions above.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from servesim.contract import (
    ForwardPassMetrics,
    KvEvent,
    OutputBatch,
    Welford,
    WorkerType,
)
from servesim.runs import (
    BlockRunPending,
    RankRun,
    RunEffects,
    price_decode_chunks,
    take_run_kv_events,
)
from servesim.timing.base import scaled_ms

from servesim_trtllm.config import CapacitySchedulerPolicy

if TYPE_CHECKING:
    from servesim_trtllm.core import TrtCore
    from servesim_trtllm.rank import TrtllmRank
    from servesim_trtllm.request import TrtRequest

_GNE = CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
_MU = CapacitySchedulerPolicy.MAX_UTILIZATION
_NEVER = 1 << 62
_KEY = 1 << 40  # (passes left) * _KEY + length orders members by completion
_IDX = 1 << 24  # agenda entries are pass * _IDX + batch index (plain ints heap fastest)
# Passes priced one by one before switching to numpy chunks (both bit-identical): most runs
# end within a few passes, where numpy's per-call overhead would dominate.
_VECTOR_MIN = 16


TrtRunPending = BlockRunPending



def _next_event(c: int, nblocks: int, bs: int, caching: bool) -> int:
    """Passes from now until a decode whose pre-pass computed count is ``c`` (holding
    ``nblocks`` blocks) allocates (target ``c + 1 + d`` past the table) or fills a block."""
    d = nblocks * bs - c
    if d < 0:
        d = 0
    if caching:
        f = (-(c + 1)) % bs
        if f < d:
            d = f
    return d


def _head_watch(core: TrtCore) -> set[int] | None | bool:
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


def _batch_order(rank: TrtllmRank) -> dict[int, TrtRequest]:
    """The order a steady step schedules the running requests in: admission order, except
    under max_utilization, which walks the active list in submission order (``core.reqs``;
    a steady run there has an empty queue, so the two hold the same requests). They differ
    after a ``beneficialToSkip`` or a pause admitted a request out of submission order."""
    core = rank.core
    return core.reqs if rank.policy is _MU else core.running


def _steady(rank: TrtllmRank) -> tuple[int, int, int, list[int], list[int]] | None:
    """``(Σ lengths, Σ squares, passes until the first completion, first block event per
    request as pass * _IDX + batch index, passes left per request)`` or None when the next
    step is not steady."""
    core = rank.core
    if rank.config.worker_type is not WorkerType.AGGREGATED or rank.services.record_schedule:
        return None
    book = rank.book
    if book.sources or book.dests or book.events or book.holding or rank.handoff.activated:
        return None
    running = core.running
    m = len(running)
    if m == 0 or m > _limit(core.limits.max_num_tokens) or 2 * m >= _IDX:
        return None
    policy = rank.policy
    if policy is not _GNE and m > _limit(core.limits.max_batch_size):
        return None
    if policy is _MU and core.waiting:
        return None
    bs = core.bs
    caching = core.pool.prefix_caching
    total = sq = 0
    first_done = _NEVER
    cross: list[int] = []
    add = cross.append
    rems: list[int] = []
    add_rem = rems.append
    i = 0
    for r in _batch_order(rank).values():
        gen = r.generated
        length = r.prompt_len + gen
        c = r.num_computed
        # Running requests hold KV (started); one emitted token implies first_output_sent.
        if c != length - 1 or c < r.ctx_len or not gen:
            return None
        left = r.max_output - gen
        if left < first_done:
            first_done = left
        add_rem(left)
        total += length
        sq += length * length
        # _next_event inlined (this loop is the per-run cost stepping pays per pass).
        d = len(r.table.ids) * bs - c
        if d < 0:
            d = 0
        if caching:
            f = -length % bs
            if f < d:
                d = f
        add(d * _IDX + i)
        i += 1
    if first_done < 1:
        return None
    return total, sq, first_done, cross, rems


def execute_run(rank: TrtllmRank, now: float, horizon: float, max_passes: int,
                through_completions: bool = False) -> RankRun | None:
    # The queue head first: an admissible head is the usual reason to step, and cheap to see.
    core = rank.core
    head = _head_watch(core) if rank.policy is _GNE else None
    if head is False:
        return None
    watch = head if isinstance(head, set) and head else None
    shape = _steady(rank)
    if shape is None:
        return None
    total, sq, first_done, cross, all_rems = shape
    running = list(_batch_order(rank).values())
    m = len(running)
    ends: list[float] = []
    segments = [(0, total, sq, m)]
    stopped = _pass_ends(rank, now, horizon, total, m, 0, min(first_done, max_passes), ends)
    rems: list[int] | None = None
    if not stopped and first_done < max_passes and through_completions and _may_continue(rank):
        # Every member emitted up to the first completion before the horizon: continue
        # without the completed ones (priced per segment between completions).
        rems = all_rems
        keyed = [rem * _KEY + r.prompt_len + r.generated
                 for r, rem in zip(running, rems, strict=True)]
        segments += _more_segments(rank, horizon, keyed, total, sq, m, first_done,
                                   max_passes, ends)
    elif len(ends) >= first_done:
        rems = all_rems
    run = TrtRunPending(now)
    k = _replay_crossings(rank, run, running, cross, len(ends), watch, rems)
    if k == 0:
        return None
    del ends[k:]
    run.ends = ends
    run.segments = [seg for seg in segments if seg[0] < k]
    completed_at = _commit(rank, run, running, k, rems)
    return RankRun(now, tuple(ends), run, completed_at)


def _may_continue(rank: TrtllmRank) -> bool:
    """Whether a completion inside a run leaves the next pass's batch to the remaining
    members: nothing waits (GNE would admit into the freed room; MU runs only with an empty
    queue), or the static batch, which is joined only once every member has completed."""
    return rank.policy is CapacitySchedulerPolicy.STATIC_BATCH or not rank.core.waiting


def _more_segments(rank: TrtllmRank, horizon: float, keyed: list[int], total: int, sq: int,
                   m: int, first_done: int, max_passes: int,
                   ends: list[float]) -> list[tuple[int, int, int, int]]:
    """Price the passes after the first completion, one segment ``(first pass, Σ pre-run
    lengths, Σ squares, batch size)`` between completions at a time, until the horizon, the
    last member's completion or ``max_passes``. Members leave in order of passes left
    (``keyed`` is heapified in place and popped only as far as the run gets)."""
    heapq.heapify(keyed)
    out: list[tuple[int, int, int, int]] = []
    j0 = first_done
    while True:
        while keyed and keyed[0] // _KEY == j0:
            length = heapq.heappop(keyed) % _KEY
            total -= length
            sq -= length * length
            m -= 1
        if m == 0 or j0 >= max_passes:
            return out
        j1 = min(keyed[0] // _KEY, max_passes)
        out.append((j0, total, sq, m))
        if _pass_ends(rank, ends[-1], horizon, total, m, j0, j1, ends):
            return out
        j0 = j1


def _pass_ends(rank: TrtllmRank, now: float, horizon: float, total: int, m: int,
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


def _replay_crossings(rank: TrtllmRank, run: TrtRunPending, running: list[TrtRequest],
                      cross: list[int], k: int, watch: set[int] | None,
                      rems: list[int] | None) -> int:
    """Apply the block steps of passes ``< k`` in (pass, batch) order, then each pass's
    completions (``TrtCore.remove`` in batch order, as ``emit`` after scheduling), draining KV
    events per pass; returns the passes kept (fewer when an allocation could fail at some
    pass, or when a block it would finalise is one the held-back queue head could reuse)."""
    core = rank.core
    pool = core.pool
    bs = core.bs
    caching = pool.prefix_caching
    native = core.native
    n = len(running)
    free, evict = pool._free, pool._evict  # noqa: SLF001 - allocation headroom
    events_on = pool.events_enabled
    occupancy = run.occupancy
    occupancy.append((-1, pool.num_active, pool.num_inactive))
    leftover = events_on  # events left by commands belong to pass 0, as when stepping
    cross = _agenda(cross, k, rems)
    while cross:
        j = cross[0] // _IDX
        due = []
        finished = []
        while cross and cross[0] // _IDX == j:
            i = heapq.heappop(cross) % _IDX
            if i < n:
                due.append(i)
            else:
                finished.append(running[i - n])
        need = 0
        for i in due:
            r = running[i]
            if r.num_computed + j + 1 > len(r.table.ids) * bs:
                need += 1
        if need > len(free) + len(evict) or (watch and _would_publish(core, running, due, j, watch)):
            # An allocation could fail, or GNE admission (after the running requests, in
            # the same step) could reuse a block this pass publishes: stepping decides.
            if j and leftover:
                run.take_events(pool, 0)
            return j
        if j and leftover:
            run.take_events(pool, 0)
        leftover = False
        _pass_block_steps(core, running, due, j, native)
        for i in due:
            r = running[i]
            nxt = j + 1 + _next_event(r.num_computed + j + 1, len(r.table.ids), bs, caching)
            if nxt < k and (rems is None or nxt < rems[i]):
                heapq.heappush(cross, nxt * _IDX + i)
        for r in finished:
            core.remove(r)
        occupancy.append((j, pool.num_active, pool.num_inactive))
        if events_on:
            run.take_events(pool, j)
    if leftover:
        run.take_events(pool, 0)
    return k


def _agenda(cross: list[int], k: int, rems: list[int] | None) -> list[int]:
    """The heap of a run's per-request events before pass ``k``, as ``pass * _IDX + x``:
    block steps with ``x`` the batch index (only while the request still decodes) and
    completions with ``x = n + batch index``, which sort after the pass's block steps and in
    batch order."""
    lim = k * _IDX
    if rems is None:
        out = [c for c in cross if c < lim]
    else:
        n = len(rems)
        out = [c for c in cross if c < lim and c // _IDX < rems[c % _IDX]]
        out.extend((rem - 1) * _IDX + n + i for i, rem in enumerate(rems) if rem <= k)
    heapq.heapify(out)
    return out


def _would_publish(core: TrtCore, running: list[TrtRequest], due: list[int], j: int,
                   watch: set[int]) -> bool:
    """Whether pass ``j`` would finalise a block whose sequence hash is in ``watch``
    (computing the hashes has no observable effect)."""
    bs = core.bs
    if not core.pool.prefix_caching:
        return False
    for i in due:
        r = running[i]
        target = r.num_computed + j + 1
        if target % bs == 0:
            full = target // bs
            seq, _ = r.hashes(full, bs)
            if any(h in watch for h in seq[r.table.num_cached:full]):
                return True
    return False


def _pass_block_steps(core: TrtCore, running: list[TrtRequest], due: list[int], j: int,
                      native: bool) -> None:
    """What :meth:`TrtCore.decode_step` (and, for native policies, ``flush_finalize``) do to
    the pool at pass ``j`` for the requests in ``due`` (batch order)."""
    bs = core.bs
    pool = core.pool
    caching = pool.prefix_caching
    fin: list[TrtRequest] = []
    for i in due:
        r = running[i]
        target = r.num_computed + j + 1
        table = r.table
        if target > len(table.ids) * bs:
            if not pool.allocate(table, len(table.ids) + 1):
                raise RuntimeError(f"run: allocation for request {r.rid} failed despite headroom")
            core.reserved -= 1
        if caching and target % bs == 0:
            if native:
                fin.append(r)
            else:
                core._finalize(r, target // bs)  # noqa: SLF001 - the stepping path's call
    for r in fin:
        full = (r.num_computed + j + 1) // bs
        if full > r.table.num_cached:
            core._finalize(r, full)  # noqa: SLF001


def _commit(rank: TrtllmRank, run: TrtRunPending, running: list[TrtRequest], k: int,
            rems: list[int] | None) -> tuple[tuple[int, int], ...]:
    """Advance every member by its tokens in the run (``k``, or up to its completion; the
    completed ones were removed at their pass). Returns the completions before the last pass
    as ``(pass, request id)``, in stepping's order."""
    core = rank.core
    members = [r.rid for r in running]
    completed: list[int] = []
    completed_at: list[tuple[int, int]] = []
    emitters = members
    if rems is None or min(rems) > k:
        for r in running:
            r.num_computed += k
            r.generated += k
    else:
        emitters = []
        for r, rem in zip(running, rems, strict=True):
            step = k if rem > k else rem
            r.num_computed += step
            r.generated += step
            if rem == k:
                completed.append(r.rid)
            elif rem < k:
                completed_at.append((rem - 1, r.rid))
            if rem >= k:
                emitters.append(r.rid)
        if completed_at:
            completed_at.sort(key=lambda c: c[0])  # stable: batch order within a pass
            before = run.completed_before
            for j, rid in completed_at:
                before.setdefault(j, []).append(rid)
            run.departures = [(j, len(rids)) for j, rids in sorted(before.items())]
    run.members = members
    run.last_emitters = emitters
    run.queued = len(core.waiting)
    run.effects.outputs = OutputBatch(token_request_ids=list(emitters), completed=completed)
    run.counter0 = rank._fpm_counter  # noqa: SLF001
    rank._fpm_counter += k  # noqa: SLF001
    rank._prefilled = False  # noqa: SLF001
    rank._model_work = True  # noqa: SLF001
    rank._stalled = None  # noqa: SLF001
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


def complete_run(rank: TrtllmRank, run: TrtRunPending, end_ms: float) -> RunEffects:
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
