"""Disaggregated prefill→decode handoff for the ``trtllm`` rank (dynamo-mocker.md §7.2).

The command semantics are core's :class:`servesim.mechanics.handoff.HandoffBook`; this is the TRT-LLM
side (:class:`TrtHandoffAdapter`). The reference runs TRT-LLM through the same vLLM-style
core (aisimulate-engine.md §3), with one difference servesim keeps:

* **no prefix credit on the decode side**: a destination always reserves
  ``ceil(prompt / block_size)`` fresh blocks, so ``transferable_prompt_tokens`` is the whole
  prompt rounded up to blocks (the vLLM rank reuses a resident prefix instead);
* **guaranteed no evict**: a destination is reserved only when the capacity left after every
  running request's reservation to completion covers its whole sequence
  (``ceil((prompt + max_output) / block_size)`` blocks), and its growth stays reserved until
  it completes — the reference's reservations wait exactly that long (golden case
  ``trtllm_tight_decode``);
* a source request's blocks are detached from the scheduler when it completes and held
  until ``ReleaseSource``/``CancelSource``;
* an activated destination joins the running batch at the start of the next step with an
  ``Admission`` of 0 reused tokens. Its prompt is computed except for its last token, which
  the step computes as a plain decode token (one budget token, priced by the decode call):
  the first token on a decode worker costs one decode step and no prefill, as in the
  reference (§7.2; decode workers have no prefill time).

While a destination waits for capacity, fresh requests are not admitted on this rank
(§8.2 step 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import Admission, CacheTierAttribution, KvEvent, Metrics, Request, RequestId
from servesim.mechanics.handoff import DestEntry, SourceEntry

from servesim_trtllm.request import TrtRequest
from servesim_trtllm.work import StepWork

if TYPE_CHECKING:
    from servesim_trtllm.interfaces import CoreView, RankView


class TrtHandoffAdapter:
    """The trtllm rank's KV operations for :class:`servesim.mechanics.handoff.HandoffBook`."""

    def __init__(self, rank: RankView) -> None:
        self.rank = rank
        self.core: CoreView = rank.core
        self.activated: list[TrtRequest] = []  # admitted at the next step
        # Output blocks reserved for destinations not yet running (GNE accounting).
        self.growth = 0

    def submit_source(self, request: Request) -> None:
        core = self.core
        if request.request_id in core.reqs:
            from servesim.errors import CommandRejected

            raise CommandRejected(f"request {request.request_id} is already active")
        core.submit(request)

    def cancel_request(self, request_id: RequestId) -> bool:
        core = self.core
        r = core.reqs.get(request_id)
        if r is None:
            return False
        if r in self.activated:
            self.activated.remove(r)
            self.growth -= r.total_blocks - len(r.table.ids)
            core.pool.release(r.table)
            core.reqs.pop(request_id, None)
            return True
        core.remove(r)
        return True

    def release_held(self, entry: SourceEntry) -> None:
        self.core.pool.release(entry.state)

    def destination_problem(self, request: Request) -> str | None:
        core = self.core
        prompt = len(request.prompt)
        if not prompt:
            return "the prompt is empty"
        if prompt >= core.capacity_tokens:
            return f"prompt of {prompt} tokens exceeds the pool of {core.capacity_tokens} tokens"
        if request.request_id in core.reqs:
            return f"request {request.request_id} is already active"
        return None

    def try_reserve(self, entry: DestEntry) -> int | None:
        core = self.core
        r = entry.state
        if r is None:
            r = entry.state = _detached_request(core, entry.request)
        blocks = -(-r.prompt_len // core.bs)
        if r.total_blocks > core.reserved_available() - self.growth:
            return None
        if not core.pool.allocate(r.table, blocks):
            return None
        self.growth += r.total_blocks - blocks
        return blocks * core.bs

    def release_reserved(self, entry: DestEntry) -> None:
        r = entry.state
        self.growth -= r.total_blocks - len(r.table.ids)
        self.core.pool.release(r.table)

    def activate(self, entry: DestEntry) -> None:
        core = self.core
        r: TrtRequest = entry.state
        if core.pool.prefix_caching and r.prompt_len // core.bs:
            core.finalize(r, r.prompt_len // core.bs)
        # The last prompt token is left for the first step to compute as a decode token.
        r.ctx_len = r.num_computed = r.prompt_len - 1
        core.reqs[r.rid] = r
        self.activated.append(r)

    def capacity_generation(self) -> int:
        return self.core.pool.releases

    def metrics(self) -> Metrics | None:
        return self.rank.metrics()

    def drain_kv_events(self) -> list[KvEvent]:
        return self.core.pool.drain_events()

    # -- step hooks -----------------------------------------------------------------------

    def admit_activated(self, work: StepWork, max_batch: int | None) -> None:
        """Move activated destinations into the running batch, in activation order."""
        core = self.core
        while self.activated and (max_batch is None or len(core.running) < max_batch):
            r = self.activated.pop(0)
            r.started = True
            core.running[r.rid] = r
            growth = r.total_blocks - len(r.table.ids)
            self.growth -= growth
            core.reserved += growth
            r.first_cached = 0
            work.admissions.append(Admission(r.rid, 0, CacheTierAttribution(0, 0)))
            work.new_hits[r.rid] = 0


def _detached_request(core: CoreView, request: Request) -> TrtRequest:
    """A request normalised like a submitted one (output clamped to the pool) but not
    queued: it stays outside the scheduler until activated."""
    r = core.submit(request)
    del core.waiting[r.rid]
    core.unqueue(r)
    del core.reqs[r.rid]
    return r


def detach_held_source(core: CoreView, r: TrtRequest) -> None:
    """Drop a finished source request's scheduler state but keep its blocks (held)."""
    if core.running.pop(r.rid, None) is not None:
        core.reserved -= r.total_blocks - len(r.table.ids)
    r.started = False
    core.reqs.pop(r.rid, None)


__all__ = ["TrtHandoffAdapter", "detach_held_source"]
