"""Runs of steady decode passes for the ``sglang`` rank (servesim.fast.runs; docs/architecture.md, "Speed by design").

A pass is *steady* when the waiting queue is empty (or held back under FCFS: the batch is at
``max_running_requests``, or the head's admission fails at every pass — checked per pass with
stepping's own ``rem_total`` expression, in runs without evictions), no handoff state exists
and every running request is a
plain decode (first token sent, KV for its whole sequence, a radix leaf only it
locks): ``run_pass`` is then a decode pass over the whole running list (prefill-first never
applies), one token each, and nothing but the batch itself changes it:

* **memory** — pass ``j`` needs one page per request whose pre-pass length is a multiple of
  ``page_size``. ``available + evictable`` only shrinks by those pages within a run, so the run
  stops *before* the first pass where it could not cover them: ``check_decode_mem`` might
  retract there (or a lone request get stuck), and stepping decides. Cached pages evicted to
  make room are evicted with the same calls, pass by pass, as stepping's ``check_decode_mem``;
* **completion** — the first request to reach its output length ends the run *with* that
  pass (its ``finish`` runs at its batch position, as in ``_emit_decode_tokens``);
* ``new_token_ratio`` decays once per pass (no retraction happens in a run).

Pass ``j`` prices ``m`` decoders of summed length ``S + j·m`` with stepping's exact
expression (``now + scaled_ms(predict_decode_ms(...), speedup·decode_speedup)``), so
boundaries are bit-identical.

Two ways to apply a run's state changes, both identical to stepping:

* **bulk** (no KV events, no forward-pass metrics): request by request, each request's ``k``
  tokens are appended at once and its radix leaf extended once; the logical clock's ticks are
  computed so every stamp equals the one stepping would give (a request's page-completion
  tick at pass ``j`` is ``clock0 + C(j) + its rank among the requests of its page residue``);
  completions' ``finish`` runs afterwards in batch order with the clock set to its value at
  that point of the last pass. Per-pass work is O(1); per-run work O(batch);
* **stepped** (KV events or forward-pass metrics on): the scheduler's own ``run_pass`` runs
  ``k`` times (event order and FPM variances then need no re-derivation); the run still saves
  the driver's per-pass round trips.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from servesim.contract import (
    ForwardPassMetrics,
    KvEvent,
    Metrics,
    OutputBatch,
    WorkerType,
)
from servesim.fast.runs import RankRun, RunEffects, RunPending, take_run_kv_events
from servesim.timing.base import scaled_ms

from servesim_sglang.fast.run_head import Head, held_head
from servesim_sglang.pass_outcome import PassOutcome
from servesim_sglang.policies import FcfsPolicy

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.mechanics.handoff import HandoffBook
    from servesim.rank import RankIdentity, RankServices

    from servesim_sglang.config import SchedulerParams
    from servesim_sglang.handoff import SglangHandoffAdapter
    from servesim_sglang.interfaces import RankCounters, SchedulerView
    from servesim_sglang.radix_cache import RadixCache
    from servesim_sglang.request import SglangRequest


class RunRank(Protocol):
    """A ``SglangRank`` (servesim_sglang.rank) as its runs see it: the scheduler and the
    radix cache, the rank's configuration, and the per-pass state a run advances."""

    identity: RankIdentity
    config: EngineConfig
    services: RankServices
    params: SchedulerParams
    cache: RadixCache
    requests: dict[int, SglangRequest]
    handoff: SglangHandoffAdapter
    book: HandoffBook
    counters: RankCounters
    prefilled: bool  # the last pass prefilled (Rank.prefill_in_pass)
    model_work: bool  # the last pass ran the model (Rank.model_work_in_pass)
    # the (cache releases, waiting_version) at which the rank found itself stalled, or None
    stalled: tuple[int, int] | None

    @property
    def sched(self) -> SchedulerView: ...

    def metrics(self, hit_tokens: int = 0, total_tokens: int = 0) -> Metrics: ...

    def fpm(self, out: PassOutcome) -> dict[str, Any]:
        """The forward-pass metrics fields of a stepped pass."""
        ...


class SglangRunPending(RunPending):
    """A committed sglang run (servesim.fast.runs.RunPending)."""

    __slots__ = ("used", "present", "fpms")

    def __init__(self, started_at_ms: float) -> None:
        super().__init__(started_at_ms)
        self.used: list[int] = []  # used pages after each pass but the last
        self.present: list[int] = []  # members decoding in each pass
        self.fpms: list[dict[str, Any]] | None = None


class _Plan:
    __slots__ = ("ends", "evictions", "used", "grants", "residues", "present", "open")

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.evictions: list[tuple[int, int]] = []  # (pass, tokens) evicted at its start
        self.used: list[int] = []  # used pages after each pass (its completions included)
        self.grants = 0
        self.residues: list[int] = []
        self.present: list[int] = []  # members decoding in each pass
        self.open = False  # every pass up to kmax was planned (no stop)


def _steady(rank: RunRank) -> tuple[int, int, list[int]] | None:
    """``(Σ lengths, passes until the first completion, length residues mod page size)`` of
    a steady batch, or None when the next pass is not a plain decode of every request."""
    s = rank.sched
    if not s.running or rank.counters.rejected:
        return None
    if s.waiting and type(s.policy) is not FcfsPolicy:  # others reorder (or draw) every pass
        return None
    if rank.services.record_schedule or rank.config.worker_type is not WorkerType.AGGREGATED:
        return None
    if not rank.params.behaviour.runs_supported:
        return None
    book = rank.book
    if rank.handoff.activated or book.sources or book.dests or book.events or book.source_of:
        return None
    cache = s.cache
    ps = cache.page_size
    if ps == 1:
        return _steady_page1(s.running, cache)
    caching = cache.caching
    root = cache.root
    total = 0
    first_done = 1 << 62
    residues: list[int] = []
    add = residues.append
    for r in s.running:
        lease = r.lease
        length = len(r.tokens)
        if (
            lease is None
            or not r.first_output_sent
            or r.materialized != length
            or lease.pages != -(-length // ps)
        ):
            return None
        if caching:
            node = lease.node
            if node.lock != 1 or node.children or node is root or lease.cached != length - length % ps:
                return None
        rem = r.remaining_output
        if rem < first_done:
            first_done = rem
        total += length
        add(length % ps)
    if first_done < 1:
        return None
    return total, first_done, residues


def _steady_page1(running: list[SglangRequest], cache: Any) -> tuple[int, int, list[int]] | None:
    """:func:`_steady` for page size 1 (every residue is 0), the per-run hot loop."""
    caching = cache.caching
    root = cache.root
    total = 0
    first_done = 1 << 62
    for r in running:
        lease = r.lease
        length = len(r.tokens)
        if lease is None or not r.first_output_sent or r.materialized != length or lease.pages != length:
            return None
        if caching:
            node = lease.node
            if node.lock != 1 or node.children or node is root or lease.cached != length:
                return None
        rem = r.remaining_output
        if rem < first_done:
            first_done = rem
        total += length
    if first_done < 1:
        return None
    return total, first_done, [0] * len(running)


def _plan(
    rank: RunRank,
    now: float,
    horizon: float,
    kmax: int,
    total: int,
    residues: list[int],
    leave: dict[int, list[int]] | None = None,
    head: Head | None = None,
) -> _Plan:
    """Pass ends, evictions and occupancy of the passes that start before ``horizon`` (at
    most ``kmax``), stopping before a pass whose pages might not fit and after a pass that
    ends at or after ``horizon`` or takes no time.

    ``leave`` (page size 1 only): pass -> final lengths of the requests completing in it;
    they stop decoding after it and give back their private pages (the pages their unlocked
    prefix makes evictable are left out of ``available + evictable``: stopping early is safe).
    """
    s = rank.sched
    cache = s.cache
    ps = cache.page_size
    m = len(residues)
    counts = [0] * ps
    for res in residues:
        counts[res] += 1
    tt = s.p.total_tokens
    sp = s.speedup * s.decode_speedup
    predict = s.timing.predict_decode_ms
    caching = cache.caching
    free = cache.free_pages
    logical = free * ps + cache.evictable_size
    pages = cache.total_pages
    plan = _Plan()
    ends, used, present = plan.ends, plan.used, plan.present
    evictable = cache.evictable_size
    ratio, step, floor = s.ratio, s.p.decay_step, s.p.min_new_token_ratio
    start = now
    for j in range(kmax):
        if m == 0:
            break
        g = m if ps == 1 else counts[-j % ps]
        need = g * ps
        if logical < need:
            break
        if head is not None:
            # ``_admit`` at pass j: the head must still fail ``charged + reserve < rem_total``
            # (stepping's float expression), and no eviction may shorten its match.
            if head.fixed_tree and free * ps < need:
                break
            if head.ask is not None:
                rem_total = float(free * ps + evictable) - (head.reserved - m * j) * ratio
                if not head.ask >= rem_total:
                    break
        if free * ps < need:
            plan.evictions.append((j, need - free * ps))
            free = need // ps
        end = start + scaled_ms(predict(m, min(total, tt), total // m, tt), sp)
        free -= g
        logical -= need
        plan.grants += g
        present.append(m)
        total += m
        if leave is not None and j in leave:
            for final in leave[j]:
                total -= final
                m -= 1
                if not caching:  # else a page-1 request's pages all stay in the tree
                    free += final
                    logical += final
        ends.append(end)
        used.append(pages - free)
        ratio = max(ratio - step, floor)
        if end >= horizon or end == start:
            break
        start = end
    else:
        plan.open = True
    plan.residues = residues
    return plan


def execute_run(
    rank: RunRank, now: float, horizon: float, max_passes: int, through_completions: bool = False
) -> RankRun | None:
    s = rank.sched
    head = None
    if s.waiting:
        if type(s.policy) is not FcfsPolicy or not s.running:
            return None
        head = held_head(s)  # first: it rejects a head that can be admitted now cheaply
        if head is None:
            return None
    shape = _steady(rank)
    if shape is None:
        return None
    total, first_done, residues = shape
    plan = _plan(rank, now, horizon, min(first_done, max_passes), total, residues, None, head)
    if (
        plan.open
        and through_completions
        and not s.waiting
        and first_done < max_passes
        and s.cache.page_size == 1
    ):
        # Nothing waits, so a completion enables nothing: continue without the completed
        # (the driver retires them at their pass), up to the last member's completion.
        leave: dict[int, list[int]] = {}
        last = 0
        for r in s.running:
            rem = r.remaining_output
            leave.setdefault(rem - 1, []).append(len(r.tokens) + rem)
            if rem > last:
                last = rem
        plan = _plan(rank, now, horizon, min(last, max_passes), total, residues, leave)
    k = len(plan.ends)
    if k == 0:
        return None
    run = SglangRunPending(now)
    run.ends = plan.ends
    run.used = plan.used
    run.present = plan.present
    run.members = [r.rid for r in s.running]
    run.queued = len(s.waiting)
    # Events left by earlier commands belong to pass 0's boundary, as when stepping.
    run.take_events(s.cache, 0)
    if s.cache.emit or rank.services.emit_forward_pass_metrics:
        _stepped(rank, run, k)
    else:
        _bulk(rank, run, plan, k)
    completed_at = tuple((j, rid) for j, rids in run.completed_before.items() for rid in rids)
    return RankRun(now, tuple(plan.ends), run, completed_at)


def _stepped(rank: RunRank, run: SglangRunPending, k: int) -> None:
    """``k`` passes through the scheduler's own ``run_pass``."""
    s = rank.sched
    fpm_on = rank.services.emit_forward_pass_metrics
    fpms: list[dict[str, Any]] = []
    start = run.started_at_ms
    out = None
    for j in range(k):
        out = s.run_pass(start)
        rank.counters.passes += 1
        if (
            out.end_ms != run.ends[j]
            or out.retracted
            or out.rejected
            or out.admissions
            or len(out.token_rids) != run.present[j]
        ):
            raise RuntimeError(f"sglang run: pass {j} left the steady batch")
        if out.completed and j < k - 1:
            run.completed_before[j] = list(out.completed)
        run.take_events(s.cache, j)
        if fpm_on:
            fpms.append(rank.fpm(out))
        start = out.end_ms
    assert out is not None
    run.fpms = fpms if fpm_on else None
    _finish_rank(rank, run, list(out.completed), list(out.token_rids))


def _bulk(rank: RunRank, run: SglangRunPending, plan: _Plan, k: int) -> None:
    """Apply ``k`` decode passes request by request (see the module docstring)."""
    s = rank.sched
    cache = s.cache
    cache.free_pages -= plan.grants
    ps = cache.page_size
    caching = cache.caching
    clock0 = cache.clock
    # before[j]: page completions (ticks) in passes < j; a request of residue r completes a
    # page at pass j when (r + j + 1) % ps == 0 (page size 1: every member, every pass).
    before = [0] * (k + 1)
    if ps == 1:
        for j in range(k):
            before[j + 1] = before[j] + plan.present[j]
    else:
        counts = [0] * ps
        for res in plan.residues:
            counts[res] += 1
        for j in range(k):
            before[j + 1] = before[j] + counts[(-j - 1) % ps]
    done: list[tuple[int, SglangRequest, int]] = []
    keep: list[SglangRequest] = []
    if ps == 1:
        _bulk_page1(s.running, k, cache, clock0, before, done, keep)
    else:
        _bulk_pages(s.running, k, cache, clock0, before, done, keep)
    done.sort(key=lambda d: d[0])  # stable: batch order within a pass
    # Evictions at each pass's start and completions at its end, in stepping's order (a
    # completion unlocks pages that a later pass may evict).
    evictions = plan.evictions
    e = 0
    out = PassOutcome(0.0)  # only its completions and cached tokens are read
    for c, r, clock in done:
        # Consecutive passes' evictions with no completion between them go in one call: the
        # LRU pops are the same (a tail cut leaves its leaf the heap's minimum) and no event
        # is published in the bulk path.
        tokens = 0
        while e < len(evictions) and evictions[e][0] <= c:
            tokens += evictions[e][1]
            e += 1
        if tokens:
            cache.evict(tokens)
        _append_tokens(r, 1)
        if caching:
            cache.clock = clock  # the tick finish() takes is stepping's
        s.complete(r, out)
        if c < k - 1:
            run.completed_before.setdefault(c, []).append(out.completed.pop())
    rest = sum([t for _, t in evictions[e:]])
    if rest:
        cache.evict(rest)
    if caching:
        cache.clock = clock0 + before[k]
    s.running = keep
    ratio, step, floor = s.ratio, s.p.decay_step, s.p.min_new_token_ratio
    for _ in range(k):
        ratio = max(ratio - step, floor)
    s.ratio = ratio
    rank.counters.passes += k
    last = run.members
    if run.completed_before:
        gone = {rid for rids in run.completed_before.values() for rid in rids}
        last = [rid for rid in last if rid not in gone]
    _finish_rank(rank, run, out.completed, list(last))


def _bulk_page1(
    running: list[SglangRequest],
    k: int,
    cache: Any,
    clock0: int,
    before: list[int],
    done: list[tuple[int, SglangRequest, int]],
    keep: list[SglangRequest],
) -> None:
    """Page size 1: every member takes a page and completes one at every pass it decodes in,
    so member ``i``'s (1-based) tick at pass ``j`` is ``clock0 + before[j] + i`` less the
    earlier members that completed before pass ``j``. A member with ``rem <= k`` tokens left
    completes at pass ``rem - 1`` (its last token and ``finish`` are left to the caller)."""
    caching = cache.caching
    protected = 0
    i = 0
    gone: list[int] = []  # completion passes of earlier members
    for r in running:
        i += 1
        rem = r.remaining_output
        c = rem - 1 if rem <= k else -1
        steps = c if c >= 0 else k
        if steps:
            o = r.output_len
            ids = r.output_ids
            if ids is None:
                b = r.rid * 0x9E3779B1 + 0x632BE5AB + o * 0x85EBCA77
                new = [v & 0xFFFFFFFF for v in range(b, b + steps * 0x85EBCA77, 0x85EBCA77)]
            else:
                new = _new_tokens(r, steps)
            r.tokens.extend(new)
            r.output_len = o + steps
            r.remaining_output = rem - steps
            r.materialized += steps
        lease = r.lease
        assert lease is not None
        lease.pages += steps if c < 0 else rem
        if caching and steps:
            lease.node.key.extend(new)
            lease.cached += steps
            protected += steps
            jl = steps - 1
            pos = i - sum([1 for g in gone if g < jl]) if gone else i
            lease.node.stamp = lease.touch = clock0 + before[jl] + pos
        if c >= 0:
            pos = i - sum([1 for g in gone if g < c]) if gone else i
            done.append((c, r, clock0 + before[c] + pos - 1))
            gone.append(c)
        else:
            keep.append(r)
    cache.protected_size += protected


def _bulk_pages(
    running: list[SglangRequest],
    k: int,
    cache: Any,
    clock0: int,
    before: list[int],
    done: list[tuple[int, SglangRequest, int]],
    keep: list[SglangRequest],
) -> None:
    """Page size > 1: a request of residue ``res`` takes a page at passes ``≡ -res`` and
    completes one at passes ``≡ -res - 1`` (mod ``ps``); its rank among its residue class
    orders its tick within a pass."""
    ps = cache.page_size
    caching = cache.caching
    seen = [0] * ps
    for r in running:
        length = len(r.tokens)
        res = length % ps
        seen[res] += 1
        pos = seen[res]
        last = r.remaining_output == k
        steps = k - 1 if last else k
        _append_tokens(r, steps)
        jp = -res % ps  # first pass needing a new page
        if jp < k:
            r.lease.pages += (k - 1 - jp) // ps + 1  # type: ignore[union-attr]
        if caching:
            jc = (ps - 1 - res) % ps  # first pass completing a page
            if jc < steps:
                jl = jc + (steps - 1 - jc) // ps * ps
                lease = r.lease
                assert lease is not None
                node = lease.node
                toks = r.tokens
                end = len(toks) - len(toks) % ps
                node.key.extend(toks[lease.cached : end])
                cache.protected_size += end - lease.cached
                lease.cached = end
                node.stamp = lease.touch = clock0 + before[jl] + pos
        if last:
            done.append((k - 1, r, clock0 + before[k - 1] + pos - 1))
        else:
            keep.append(r)


def _new_tokens(r: SglangRequest, n: int) -> list[int]:
    """The request's next ``n`` output tokens (``SglangRequest.next_token`` ``n`` times)."""
    i = r.output_len
    ids = r.output_ids
    if ids is not None and i + n <= len(ids):
        return list(ids[i : i + n])
    base = r.rid * 0x9E3779B1 + 0x632BE5AB
    return [
        ids[x] if ids is not None and x < len(ids) else (base + x * 0x85EBCA77) & 0xFFFFFFFF
        for x in range(i, i + n)
    ]


def _append_tokens(r: SglangRequest, n: int) -> None:
    """``n`` decode steps of one request's token bookkeeping (``_emit_decode_tokens``)."""
    if n <= 0:
        return
    r.tokens.extend(_new_tokens(r, n))
    r.output_len += n
    r.remaining_output -= n
    r.materialized += n


def _finish_rank(rank: RunRank, run: SglangRunPending, completed: list[int], last: list[int]) -> None:
    """The rank's per-pass bookkeeping of ``execute_pass`` for the whole run; ``last`` are
    the members emitting at the last pass, ``completed`` those completing there."""
    for rid in completed:
        rank.requests.pop(rid, None)
    for rids in run.completed_before.values():
        for rid in rids:
            rank.requests.pop(rid, None)
    rank.prefilled = False
    rank.model_work = True
    rank.stalled = None
    run.effects.outputs = OutputBatch(token_request_ids=last, completed=completed)


def take_kv_events(run: SglangRunPending, before_pass: int) -> dict[int, list[KvEvent]]:
    return take_run_kv_events(run.kv_events, before_pass)


def complete_run(rank: RunRank, run: SglangRunPending, end_ms: float) -> RunEffects:
    k = len(run.ends)
    last = run.effects
    run.take_events(rank.cache, k - 1)  # commands applied while the last pass was in flight
    tokens = last.outputs.token_request_ids
    absent: list[int] = []
    k_last = run.present[-1]
    if len(tokens) != k_last:
        emitted = set(tokens)
        gone = {rid for rids in run.completed_before.values() for rid in rids}
        absent = [r for r in run.members if r not in emitted and r not in gone]
    final = rank.metrics()
    present = run.present
    queued = run.queued
    used = run.used
    dp = rank.identity.dp_rank

    def pass_metrics() -> list[Metrics]:
        out = [
            Metrics(
                dp_rank=dp,
                active_blocks=used[j],
                inactive_blocks=0,
                total_blocks=final.total_blocks,
                running_requests=present[j + 1],
                waiting_requests=queued,
                preemptions_total=final.preemptions_total,
                sglang_cache_hit_tokens=0,
                sglang_cache_total_tokens=0,
            )
            for j in range(k - 1)
        ]
        out.append(final)
        return out

    effects = RunEffects(
        started_at_ms=run.started_at_ms,
        pass_ends=run.ends,
        members=run.members,
        absent_last=absent,
        completed=list(last.outputs.completed),
        kv_events=run.kv_events,
        pass_metrics_factory=pass_metrics,
        completed_before=run.completed_before,
    )
    if run.fpms is not None:
        starts = [run.started_at_ms, *run.ends[:-1]]
        ends = [*run.ends[:-1], end_ms]
        effects.forward_pass_metrics = [
            ForwardPassMetrics(**f, duration_ms=max(0.0, e - b))
            for f, b, e in zip(run.fpms, starts, ends, strict=True)
        ]
    return effects


__all__ = ["SglangRunPending", "complete_run", "execute_run", "take_kv_events"]
