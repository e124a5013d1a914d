"""Disaggregated prefill→decode handoff for the ``vllm`` rank (dynamo-mocker.md §7.2).

The command semantics live in core's :class:`servesim.mechanics.handoff.HandoffBook`; this module is the
vLLM side of it (:class:`VllmHandoffAdapter`):

* a source request runs as an ordinary request; when it finishes, the scheduler asks the book
  whether to keep its block table (held until ``ReleaseSource``/``CancelSource``);
* a destination reserves ``ceil(prompt / block_size)`` blocks, reusing the longest resident
  prefix of the prompt's full blocks (the reference's ``ReuseResidentPrefix``); only the
  fresh blocks need transferring, so ``transferable_prompt_tokens = fresh × block_size``;
* activation finalises the prompt's full blocks (``Stored`` KV events with the activation
  command, aisimulate-engine.md §4.6) and queues the request as ``REMOTE``: admitted
  without blocks or prefill work, it samples its first token in the next pass, priced by the
  decode call (decode workers have no prefill time, §7.2);
* while a destination is pending, only such prebuilt requests may be admitted
  (``vllm_prebuilt_waiting_request_runs_before_blocked_pending_destination``,
  ``blocked_destination_head_prevents_fresh_kv_admission_without_spinning``);
* servesim's no-hang rule: when nothing runs and the waiting head cannot fit because
  prebuilt requests queued behind it hold the KV (a decode request preempted back to the
  head), the prebuilt requests are admitted first; strict FIFO would stall the rank forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import KvEvent, Metrics, Request, RequestId
from servesim.mechanics.handoff import DestEntry, SourceEntry

from servesim_vllm.lora import served_name
from servesim_vllm.request import Status, VllmRequest

if TYPE_CHECKING:
    from servesim_vllm.interfaces import RankView, SchedulerView


class VllmHandoffAdapter:
    """The vLLM rank's KV operations for :class:`servesim.mechanics.handoff.HandoffBook`."""

    def __init__(self, rank: RankView) -> None:
        self.rank = rank
        self.sched = rank.sched

    def submit_source(self, request: Request) -> None:
        self.rank.enqueue(request)

    def cancel_request(self, request_id: RequestId) -> bool:
        return self.sched.cancel(request_id)

    def release_held(self, entry: SourceEntry) -> None:
        self.sched.pool.release(entry.state)

    def destination_problem(self, request: Request) -> str | None:
        s = self.sched
        blocks = -(-len(request.prompt) // s.bs)
        if not len(request.prompt):
            return "the prompt is empty"
        if blocks > s.usable_blocks:
            return f"prompt of {blocks} blocks exceeds the pool of {s.usable_blocks} blocks"
        if request.request_id in s.requests:
            return f"request {request.request_id} is already active"
        return None

    def try_reserve(self, entry: DestEntry) -> int | None:
        s = self.sched
        req = entry.state
        if req is None:
            req = entry.state = VllmRequest(entry.request, s.cfg.max_model_len)
            if entry.request.lora:
                req.table.lora_name = served_name(s.lora, entry.request.lora)
            if s.caching:
                # Placeholders for blocks no other request can share when nothing outside
                # the rank reads hashes, as for prompts submitted here (VllmScheduler).
                req.load_prompt_hashes(s.bs, elide=s.lazy_hashes)
        bs = s.bs
        target = -(-req.prompt_len // bs)
        reuse = 0
        if s.caching:
            full = req.prompt_len // bs
            req.ensure_hashes(full, bs)
            reuse, _active = s.pool.lookup(req.seq, full)
        if not s.pool.allocate(req.table, target, req.seq[:reuse] if reuse else ()):
            return None
        return (target - reuse) * bs

    def release_reserved(self, entry: DestEntry) -> None:
        self.sched.pool.release(entry.state.table)

    def activate(self, entry: DestEntry) -> None:
        s = self.sched
        req: VllmRequest = entry.state
        bs = s.bs
        if s.caching:
            full = req.prompt_len // bs
            tokens = None
            if s.token_ids_in_events:
                tokens = lambda i: req.tokens(i * bs, (i + 1) * bs)  # noqa: E731
            s.pool.finalize(req.table, full, req.seq, req.loc, tokens)
        req.computed = req.prompt_len
        req.status = Status.REMOTE
        s.requests[req.rid] = req
        _insert_by_arrival(s, req, entry.seq)
        s.queue_stats(req, +1)

    def capacity_generation(self) -> int:
        return self.sched.pool.releases

    def metrics(self) -> Metrics | None:
        return self.rank.metrics()

    def drain_kv_events(self) -> list[KvEvent]:
        return self.sched.pool.drain_events()


def _insert_by_arrival(s: SchedulerView, req: VllmRequest, seq: int) -> None:
    """Activated destinations join the waiting queue in their reservation order (§8.2
    step 5): ahead of later-reserved activated requests that are still waiting."""
    waiting = s.waiting
    if s.by_priority is not None:  # the heap orders it by (priority, arrival)
        waiting.append(req)
        return
    book = s.book
    pos = len(waiting)
    while pos > 0:
        prev = waiting[pos - 1]
        if prev.status is not Status.REMOTE or book.dests[book.dest_of[prev.rid]].seq < seq:
            break
        pos -= 1
    waiting.insert(pos, req)


def admit_prebuilt_only(s: SchedulerView) -> None:
    """Admission while a pending destination blocks fresh KV: prebuilt (activated) requests
    may still run, in queue order; nothing else is admitted."""
    if not s.waiting or s.preempted_in_pass:
        return
    lora = s.lora
    for req in [r for r in s.waiting if r.status is Status.REMOTE]:
        if len(s.running) >= s.max_seqs:
            return
        if lora is not None and lora.skips(req):  # max_loras holds for prebuilt requests too
            s.waiting.remove(req)
            lora.skipped.append(req)
            continue
        s.admit_remote(req)
        if s.budget == 0:
            return


def head_blocked_externally(s: SchedulerView) -> bool:
    """Whether the rank's only work is blocked on handoff state (a pending destination, or
    a waiting head that cannot fit while held sources or reserved destinations occupy KV):
    the rank then waits for an external command instead of running empty passes."""
    book = s.book
    if book is None or not book.holding or s.running or not s.waiting:
        return False
    if any(r.status is Status.REMOTE for r in s.waiting):
        return False
    if book.blocks_admission:
        return True
    head = s.waiting[0]
    if s.impossible(head):
        return False
    cached, active_cached = s.prefill_cost(head)
    needed = -(-head.length // s.bs) - active_cached // s.bs
    return needed > s.usable_blocks - s.pool.num_active


__all__ = ["VllmHandoffAdapter", "admit_prebuilt_only", "head_blocked_externally"]
