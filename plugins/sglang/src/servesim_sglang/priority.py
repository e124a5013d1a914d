"""SGLang 0.5.23's priority scheduling (``engine.scheduling_policy: priority``).

SGLang's ``--enable-priority-scheduling`` with its options, under their SGLang names in
``engine.sglang`` (``schedule_low_priority_values_first``,
``priority_scheduling_preemption_threshold``, ``disable_priority_preemption``). Sources, all
SGLang 0.5.23 (``python/sglang/srt/``):

* **Order** (``managers/schedule_policy.py``, ``SchedulePolicy.calc_priority``): under
  ``fcfs`` the waiting queue is sorted by ``(priority × sign, wait_queue_entry_time)``
  (``_sort_by_priority_and_fcfs``), under ``lof`` by ``(priority × sign, −max_new_tokens)``
  (``_sort_by_longest_output``, a stable sort); other policies ignore priorities. ``sign`` is
  −1 (higher values first) unless ``schedule_low_priority_values_first``. The entry time is
  set each time a request enters the queue (``Scheduler._add_request_to_queue``), so a
  retracted or preempted request queues behind every request of its priority that arrived
  before it re-entered; servesim counts entries (``SglangRequest.entry_seq``).
* **Preemption** (``PrefillAdder.preempt_to_schedule``, called from
  ``Scheduler._get_new_batch_prefill_raw``; on unless ``disable_priority_preemption``):
  ``batch_is_full`` is cleared before every prefill attempt and the "no free slot" early exit
  is skipped. Once a candidate finds no request slot (``batch_is_full`` set, and it stays set
  for the rest of the pass), each candidate must preempt to be admitted: the running
  requests, least urgent first and newest entry first among equals, are taken while the
  candidate is more urgent by more than the threshold, until their reserved tokens
  (``min(remaining output, clip) × ratio``, ratio 1 for ``ignore_eos``) cover
  ``len − prefix_len + min(max_new, clip) − rem_total``; ``prefix_len`` is what the
  candidate's last admission attempt matched (0 if none, or since a retraction). If too few
  qualify, nothing is preempted and admission stops. The preempted requests are released in
  batch order as a retraction is (``ScheduleBatch.release_req``: KV freed, cache evicted
  until ``remaining × SGLANG_RETRACT_DECODE_STEPS`` tokens are free, ``retraction_count``
  raised), their reservation leaves the budget, and after the batch is formed they re-enter
  the waiting queue (even when nobody was admitted). SGLang keeps them in a ``set`` there, so
  the entry order among several preempted at once is not defined; servesim uses the order in
  which they were chosen. Under the overlap loop a victim's token in flight is dropped
  (``servesim_sglang.overlap.drop_inflight``).

Not modelled: ``--max-queued-requests`` (servesim's sglang rank has no queue limit),
``--retraction-policy priority``, ``--default-priority-value`` (servesim's requests always
carry a priority, 0 by default). Priority preemption is modelled with SGLang 0.5.23's prefill
admission (``engine.sglang.two_phase_admission``, on in ``profile: sglang-0.5.23``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from servesim_sglang import overlap as _overlap
from servesim_sglang import retraction as _retraction
from servesim_sglang.policies import LofPolicy, SchedulePolicy

if TYPE_CHECKING:
    from servesim_sglang.config import SchedulerParams
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.policies import PolicyContext
    from servesim_sglang.request import SglangRequest

_ENTRY = attrgetter("entry_seq")
_MAX_OUT = attrgetter("max_out")
_PRIORITY = attrgetter("request.priority")


class PriorityOrder(SchedulePolicy):
    """The configured policy with SGLang's priority sort in front (``fcfs`` and ``lof``)."""

    def __init__(self, base: SchedulePolicy, sign: int, base_name: str) -> None:
        super().__init__(base.seed)
        self.base = base
        self.sign = sign
        self.mode = base_name if base_name in ("fcfs", "lof") else ""
        if self.mode == "lof" and not isinstance(base, LofPolicy):
            self.mode = ""
        self._entries: int | None = None  # the queue entries when it was last sorted

    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        if not self.mode:
            return self.base.order(waiting, ctx)
        # The keys never change and leaving keeps the order: only a pass after a request
        # entered the queue (SglangScheduler.entries) can find it out of order.
        entries = getattr(ctx, "entries", None)
        if entries is not None and entries == self._entries:
            return None
        self._entries = entries
        started = [r for r in waiting if r.materialized > 0]  # a chunked head stays first
        rest = [r for r in waiting if r.materialized == 0] if started else list(waiting)
        # Two stable sorts with C-level keys (the queue can hold thousands): the tie-break
        # first, then priority (reverse=True keeps equal keys in order).
        if self.mode == "fcfs":
            rest.sort(key=_ENTRY)
        else:
            rest.sort(key=_MAX_OUT, reverse=True)
        rest.sort(key=_PRIORITY, reverse=self.sign < 0)
        return started + rest


def ordering(policy: SchedulePolicy, params: SchedulerParams, name: str) -> SchedulePolicy:
    """The rank's policy: ``policy`` itself without priority scheduling."""
    if params.priority is None:
        return policy
    from servesim_sglang.config import canonical_policy

    return PriorityOrder(policy, params.priority.sign, canonical_policy(name))


def running_offset(s: SchedulerView, r: SglangRequest) -> float:
    """``PrefillAdder._get_running_request_total_token_offset``."""
    ratio = 1.0 if s.p.behaviour.ignore_eos_reserves_full_output else s.ratio
    return min(r.remaining_output + r.inflight, s.p.clip_max_new_tokens) * ratio


def preempt_to_schedule(s: SchedulerView, req: SglangRequest, rem_total: float,
                        out: PassOutcome, preempted: list[SglangRequest]) -> float | None:
    """Preempt running requests for ``req``; the reservation released (to take off the
    budget's offset), or None when ``req`` cannot preempt enough."""
    pp = s.p.priority
    assert pp is not None
    sign = pp.sign
    prio = req.request.priority
    need = (req.seq_len - req.seen_prefix + min(req.max_out, s.p.clip_max_new_tokens)) - rem_total
    chosen: list[SglangRequest] = []
    for r in sorted(s.running, key=lambda r: (-r.request.priority * sign, -r.entry_seq)):
        if (prio - r.request.priority) * -sign <= pp.threshold:
            break
        chosen.append(r)
        need -= running_offset(s, r)
        if need <= 0:
            break
    if not chosen or need > 0:
        return None
    released = 0.0
    picked = set(map(id, chosen))
    total = len(s.running)
    cache, ps = s.cache, s.p.page_size
    count = 0
    for r in list(s.running):
        if id(r) not in picked:
            continue
        count += 1
        released += running_offset(s, r)
        _overlap.drop_inflight(s, r)
        logical = cache.available_tokens + cache.evictable_size
        needed = -(-(req.seq_len - req.seen_prefix) // ps) * ps
        _retraction.retract(s, r, s.running, cache.now, out, logical, needed)
        _retraction.evict_to_free(s, (total - count) * _retraction.RETRACT_DECODE_STEPS)
    preempted.extend(chosen)
    return released


def requeue(s: SchedulerView, preempted: list[SglangRequest]) -> None:
    """``_add_request_to_queue`` for each preempted request, after the batch is formed."""
    for r in preempted:
        s.enqueue(r)
