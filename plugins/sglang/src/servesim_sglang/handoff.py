"""Disaggregated prefill→decode handoff for the ``sglang`` rank (dynamo-mocker.md §7.2).

The command semantics are core's :class:`servesim.mechanics.handoff.HandoffBook`; this is the SGLang
side (:class:`SglangHandoffAdapter`), on the radix cache:

* a source request runs as an ordinary one; when its prefill completes its lease stays
  locked — the KV is *held* — and its prompt enters the radix tree only when
  ``ReleaseSource``/``CancelSource`` finishes the lease, as SGLang caches a request on
  finishing: until then later requests cannot match it (the reference's prefix hits show
  the same, golden case ``sglang_1p1d``);
* a destination acquires a lease over the prompt, matching the radix tree first (a resident
  prefix is reused, locked, and not transferred: ``transferable_prompt_tokens`` = fresh pages
  × page size);
* activation inserts the transferred prompt into the radix tree (``Stored`` events with the
  activation command) and puts the request in the running batch at the next pass (an
  ``Admission`` of 0 reused tokens): its first token comes from the next decode step, priced
  by the decode call; decode workers have no prefill time.

While a destination waits for pages, the waiting queue is not admitted (§8.2 step 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import Admission, KvEvent, Metrics, Request, RequestId
from servesim.mechanics.handoff import DestEntry, SourceEntry

from servesim_sglang.request import SglangRequest

if TYPE_CHECKING:
    from servesim_sglang.interfaces import RankView
    from servesim_sglang.pass_outcome import PassOutcome


class SglangHandoffAdapter:
    """The sglang rank's KV operations for :class:`servesim.mechanics.handoff.HandoffBook`."""

    def __init__(self, rank: RankView) -> None:
        self.rank = rank
        self.sched = rank.sched
        self.cache = rank.cache
        self.activated: list[SglangRequest] = []  # join the running batch at the next pass

    def submit_source(self, request: Request) -> None:
        from servesim.contract import Submit
        from servesim.rank import CommandContext

        self.rank.submit(Submit(request), CommandContext(0.0, True))

    def cancel_request(self, request_id: RequestId) -> bool:
        rank = self.rank
        if request_id not in rank.requests:
            return False
        for r in self.activated:
            if r.rid == request_id:
                self.activated.remove(r)
                self._free(r)
                del rank.requests[request_id]
                return True
        rank.drop(request_id)
        return True

    def release_held(self, entry: SourceEntry) -> None:
        req: SglangRequest = entry.state
        assert req.lease is not None
        self.cache.finish(req.lease, req.tokens, min(req.seq_len, req.materialized))
        req.lease = None

    def destination_problem(self, request: Request) -> str | None:
        p = self.rank.params
        prompt = len(request.prompt)
        if not prompt:
            return "the prompt is empty"
        if self.cache.pages_for(prompt) * p.page_size >= p.total_tokens:
            return f"prompt of {prompt} tokens exceeds the pool of {p.total_tokens} tokens"
        if request.request_id in self.rank.requests:
            return f"request {request.request_id} is already active"
        return None

    def try_reserve(self, entry: DestEntry) -> int | None:
        req = entry.state
        if req is None:
            req = entry.state = SglangRequest(entry.request)
        got = self.cache.acquire(req.tokens, req.prompt_len, req.prompt_len, req.prompt_len)
        if got is None:
            return None
        req.lease, prefix = got
        fresh = req.lease.pages - prefix // self.cache.page_size
        return fresh * self.cache.page_size

    def release_reserved(self, entry: DestEntry) -> None:
        self._free(entry.state)

    def activate(self, entry: DestEntry) -> None:
        req: SglangRequest = entry.state
        assert req.lease is not None
        req.materialized = req.prompt_len
        self.cache.cache_prefix(req.lease, req.tokens, req.prompt_len)
        self.rank.requests[req.rid] = req
        self.activated.append(req)

    def capacity_generation(self) -> int:
        return self.cache.releases

    def metrics(self) -> Metrics:
        return self.rank.metrics()

    def drain_kv_events(self) -> list[KvEvent]:
        return self.cache.drain_events()

    # -- pass hooks -----------------------------------------------------------------------

    def admit_activated(self, out: PassOutcome) -> None:
        """Activated destinations join the running batch (their prompt is computed)."""
        sched = self.sched
        room = sched.p.max_running_requests - len(sched.running)
        while self.activated and room > 0:
            req = self.activated.pop(0)
            req.cached_tokens = 0
            sched.running.append(req)
            out.admissions.append(Admission(req.rid, 0))
            room -= 1

    def _free(self, req: SglangRequest) -> None:
        if req.lease is not None:
            self.cache.release(req.lease)
            req.lease = None

    # -- scheduler hooks (SglangScheduler.handoff) ----------------------------------------

    def blocks_admission(self) -> bool:
        return self.rank.book.blocks_admission

    def hold(self, req: SglangRequest) -> bool:
        return hold_source(self.rank, req)


def hold_source(rank: RankView, req: SglangRequest) -> bool:
    """Called when a request completes: keep a tracked source's lease (held KV)."""
    book = rank.book
    return bool(book.source_of) and book.on_source_complete(req.rid, req, rank.config)


__all__ = ["SglangHandoffAdapter", "hold_source"]
