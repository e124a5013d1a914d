"""SGLang 0.5.23's prefill admission (``engine.sglang.two_phase_admission``).

``Scheduler._get_new_batch_prefill_raw`` with its ``PrefillAdder`` (``schedule_policy.py``) and
``PrefillBudget`` (``mem_cache/prefill_budget.py``), for a plain full-attention pool:

* the budget is live: ``rem_total = available + evictable − total_offset`` and
  ``rem_current = available + evictable − current_offset``; locking a candidate's prefix
  takes it out of ``evictable`` at once. ``total_offset`` starts at the running requests'
  reservation, ``Σ min(remaining output, clip) × ratio`` (ratio 1 for ``ignore_eos``
  requests with ``ignore_eos_reserves_full_output``);
* a candidate is checked with its prefix locked: ``extend + min(remaining output, clip) +
  page < rem_total``, else ``NO_TOKEN``; with chunked prefill off a second candidate whose
  page-rounded extend reaches ``rem_input`` stops (``OTHER``); with chunked prefill on an
  extend over ``rem_chunk`` is cut to ``rem_chunk`` (page-aligned end), reserving no output;
* an admitted request charges ``ceil_page(extend) + page`` (``admission_page_headroom``; the
  page alone without it) plus ``min(max_new, clip)`` — its whole output, not the remainder —
  when its prefill completes; the compute budgets take ``ceil_page(extend)``;
* after each admission ``budget_state``: ``NO_TOKEN`` when ``rem_total`` or ``rem_current``
  is ≤ 0, ``OTHER`` when ``rem_input`` (``prefill_budget_after_admit``) or ``rem_chunk`` is;
* a ``NO_TOKEN`` with something admitted or running sets ``batch_is_full``, and with
  ``sticky_batch_full`` no later step admits until a request leaves the running batch;
* the policy orders the queue only past the early exits (batch full, no free slot), and
  the chunked request is not part of the queue it orders;
* the continuing chunked request goes first and is never refused: its chunk is
  ``min(rem_chunk, rem_total)`` (``add_chunked_req``);
* KV is allocated only after the batch is formed (``prepare_for_extend``): one eviction for
  the whole batch's shortfall, then the pages of each request in batch order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import Admission

from servesim_sglang import mixed as _mixed
from servesim_sglang import priority as _priority

if TYPE_CHECKING:
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.radix_cache import RadixNode
    from servesim_sglang.request import SglangRequest

_CONTINUE, _NO_TOKEN, _OTHER = 0, 1, 2
#: One admitted request: (request, prefix, chunk end, locked node; None for the chunked one).
_Item = tuple["SglangRequest", int, int, "RadixNode | None"]
WAITING_PREFIX_REFRESH_INTERVAL = 32  # schedule_policy.py
WAITING_QUEUE_PREFIX_MATCH_MAX = 128


class _Budget:
    """One pass's ``PrefillAdder`` budgets."""

    __slots__ = ("cache", "total_offset", "current_offset", "rem_input", "rem_chunk", "headroom",
                 "input_after")

    def __init__(self, s: SchedulerView) -> None:
        p, bh = s.p, s.p.behaviour
        clip = p.clip_max_new_tokens
        ratio = 1.0 if bh.ignore_eos_reserves_full_output else s.ratio
        self.cache = s.cache
        # (a token still in flight is not in SGLang's output_ids yet: the overlap loop)
        self.total_offset = sum([min(r.remaining_output + r.inflight, clip) for r in s.running]) * ratio
        self.current_offset = 0
        self.rem_input = p.max_prefill_tokens
        self.rem_chunk = p.chunked_prefill_size if p.chunking else None
        mixed = _mixed.decode_tokens(s)  # num_mixed_decode_tokens (servesim_sglang.mixed)
        if mixed:
            self.total_offset += mixed
            self.current_offset = mixed
            self.rem_input -= mixed
            if self.rem_chunk is not None:
                self.rem_chunk -= mixed
        self.headroom = p.page_size if bh.admission_page_headroom else 0
        self.input_after = bh.prefill_budget_after_admit

    def live(self) -> int:
        return self.cache.available_tokens + self.cache.evictable_size

    def rem_total(self) -> float:
        return self.live() - self.total_offset

    def charge(self, extend: int, max_new: int, ps: int) -> None:
        paged = -(-extend // ps) * ps
        self.total_offset += paged + self.headroom + max_new
        self.current_offset += paged + self.headroom
        self.rem_input -= paged
        if self.rem_chunk is not None:
            self.rem_chunk -= paged

    def state(self) -> int:
        if not (self.rem_total() > 0 and self.live() - self.current_offset > 0):
            return _NO_TOKEN
        if self.rem_input <= 0:
            return _OTHER
        if self.rem_chunk is not None and self.rem_chunk <= 0:
            return _OTHER
        return _CONTINUE


def admit(s: SchedulerView, out: PassOutcome) -> tuple[list[SglangRequest], int, int]:
    """Form the prefill batch, lock its prefixes, then allocate its KV; returns what
    ``SglangScheduler._admit`` returns (admitted requests, Σ lengths, Σ prefixes)."""
    p, bh = s.p, s.p.behaviour
    preempt = p.priority is not None and p.priority.preemption  # servesim_sglang.priority
    if preempt:
        s.batch_full = False  # cleared to try preemption with this pass's adder
    head = s.waiting[0] if s.waiting else None
    chunked = head if head is not None and 0 < head.materialized < head.seq_len else None
    if chunked is None and (not s.waiting or (bh.sticky_batch_full and s.batch_full)):
        return [], 0, 0
    slots = p.max_running_requests - len(s.running)
    if slots <= 0 and chunked is None and not preempt:
        s.batch_full = True
        return [], 0, 0
    lpm_active = s.p.policy == "lpm" and len(s.waiting) - (chunked is not None) <= s.p.lpm_fallback_threshold
    if bh.waiting_prefix_touch and lpm_active:
        _touch(s, [r for r in s.waiting if r is not chunked])
    s.order_waiting(True)
    if bh.waiting_prefix_touch and not lpm_active:
        _refresh_waiting_prefixes(s, chunked)
    budget = _Budget(s)
    plan: list[_Item] = []
    if chunked is not None:
        plan.append(_continue_chunk(s, chunked, budget))
    preempted: list[SglangRequest] = []
    for req in list(s.waiting)[len(plan):]:
        if budget.state() == _OTHER:
            break
        if preempt:
            if len(plan) >= p.max_running_requests - len(s.running):
                s.batch_full = True
            if s.batch_full:
                released = _priority.preempt_to_schedule(s, req, budget.rem_total(), out, preempted)
                if released is None:
                    break
                budget.total_offset -= released
        else:
            if len(plan) >= slots:
                s.batch_full = True
                break
            if bh.sticky_batch_full and s.batch_full:
                break
        res = _add_one(s, req, budget, plan)
        if res != _CONTINUE:
            if res == _NO_TOKEN:
                s.batch_full = bool(plan) or bool(s.running)
            break
    admitted = _allocate(s, plan, out)
    if preempted:
        if plan:  # the step trace's running batch: the survivors (the new batch joins later)
            out.running_batch = len(s.running)
        _priority.requeue(s, preempted)
    return admitted


def _touch(s: SchedulerView, reqs: list[SglangRequest]) -> None:
    """``match_kv_cache`` on each request's prompt and outputs: the match splits the edge it
    ends in and stamps its path (``split_refreshes_recency`` decides how)."""
    cache = s.cache
    for req in reqs:
        cache.touch_match(req.tokens, req.seq_len)


def _refresh_waiting_prefixes(s: SchedulerView, chunked: SglangRequest | None) -> None:
    """``SchedulePolicy._touch_waiting_prefixes`` (``SGLANG_ENABLE_WAITING_PREFIX_REFRESH``,
    on by default) under a cache-agnostic policy: every 32nd admission attempt touches the
    first 128 waiting requests' prefixes, the last of them first, so that they are evicted
    after the prefixes nobody waits for."""
    calls = s.prefix_refresh_calls
    s.prefix_refresh_calls = calls + 1
    if calls % WAITING_PREFIX_REFRESH_INTERVAL or not s.cache.caching:
        return
    queue = [r for r in s.waiting if r is not chunked][:WAITING_QUEUE_PREFIX_MATCH_MAX]
    _touch(s, queue[::-1])


def _continue_chunk(s: SchedulerView, req: SglangRequest, budget: _Budget) -> _Item:
    rem_chunk = budget.rem_chunk if budget.rem_chunk is not None else req.seq_len
    avail = min(rem_chunk, int(budget.rem_total()))
    rem = avail if avail > 0 else rem_chunk
    cand = req.seq_len - req.materialized
    # (a mixed step's running batch can take the whole chunk budget: then no progress)
    new_len = max(0, min(cand, rem))
    max_new = 0 if cand > rem else min(req.max_out, s.p.clip_max_new_tokens)
    budget.charge(new_len, max_new, s.p.page_size)
    return (req, req.materialized, req.materialized + new_len, None)


def _add_one(s: SchedulerView, req: SglangRequest, budget: _Budget, plan: list[_Item]) -> int:
    """``add_one_req``: check with the prefix locked, size the chunk, commit; the result of
    the check, or ``budget_state`` after committing."""
    cache, ps, clip = s.cache, s.p.page_size, s.p.clip_max_new_tokens
    limit = req.seq_len if req.max_out == 0 else req.seq_len - 1
    prefix, node = cache.lock_prefix(req.tokens, limit)
    req.seen_prefix = prefix  # init_next_round_input's prefix_len
    extend = req.seq_len - prefix
    total = extend + min(max(req.remaining_output, 0), clip) + ps
    paged = -(-extend // ps) * ps
    res = _CONTINUE
    max_new = min(req.max_out, clip)
    if not total < budget.rem_total():
        res = _NO_TOKEN
    elif not budget.input_after and min(paged, budget.rem_chunk or paged) > budget.rem_input:
        res = _OTHER
    elif budget.rem_chunk is None:
        if plan and paged >= budget.rem_input:
            res = _OTHER
    elif paged > budget.rem_chunk:
        end = (prefix + budget.rem_chunk // ps * ps) // ps * ps
        extend = end - prefix
        max_new = 0
        if extend <= 0:
            res = _OTHER
    if res != _CONTINUE:
        cache.unlock(node)
        return res
    plan.append((req, prefix, prefix + extend, node))
    budget.charge(extend, max_new, ps)
    return budget.state()


def _allocate(s: SchedulerView, plan: list[_Item], out: PassOutcome) -> tuple[list[SglangRequest], int, int]:
    """``prepare_for_extend``: evict the batch's shortfall once, then give each request its
    pages in batch order and record the admissions as ``_admit`` does."""
    cache, ps = s.cache, s.p.page_size
    need = 0
    for req, prefix, end, node in plan:
        held = req.lease.pages if node is None and req.lease is not None else prefix // ps
        need += max(0, cache.pages_for(end) - held)
    want = need * ps
    if s.p.behaviour.conservative_eviction and ps > 1:
        # alloc_paged_token_slots_extend evicts for extend tokens + a page per request
        want = max(want, sum([end - prefix for _r, prefix, end, _n in plan]) + len(plan) * ps)
    if want > cache.available_tokens:
        cache.evict(want - cache.available_tokens)
    can_run: list[SglangRequest] = []
    total_isl = total_prefix = 0
    for req, prefix, end, node in plan:
        first = node is not None and req.materialized == 0
        if node is None:
            assert req.lease is not None
            cache.extend(req.lease, end)
        else:
            req.lease = cache.take_pages(node, prefix, end)
        s.waiting.remove(req)
        s.waiting_version += 1
        computed = end - prefix
        req.materialized = end
        out.scheduled[req.rid] = computed
        if first:
            out.admissions.append(Admission(req.rid, prefix))
            if req.cached_tokens is None:
                req.cached_tokens = prefix
            if req.rid in s.retracted_ids:
                s.retracted_ids.discard(req.rid)
                out.resumed.append(req.rid)
        out.prefill_items.append((req.prompt_len, computed, prefix, prefix if first else 0))
        total_isl += end
        total_prefix += prefix
        can_run.append(req)
    return can_run, total_isl, total_prefix
