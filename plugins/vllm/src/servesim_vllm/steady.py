"""The steady batch kept between runs and passes, with its members' counters held lazily.

After a run of steady decode passes (servesim_vllm.runs) every running request is a plain
decoder: its prompt is done and one sampled token is left to compute. While that holds, a
:class:`SteadyBatch` describes the batch by a pass counter ``P`` that only it advances, and
per member two constants (slots on the request): ``sb``, its length minus ``P``, and
``se``, the value of ``P`` after its last pass. What changes from pass to pass is then
found without visiting every member:

* the members whose block steps fall in pass ``P`` (a pre-pass length ``L`` with
  ``L % bs`` 0 or 1: :func:`block_step`) are the top of a heap of ``(pass, serial, request)``
  entries, one per member, in batch order (serials follow the running list's order);
* the members completing with pass ``P`` are ``ends[P + 1]``, in batch order;
* the batch's summed lengths and squares come from the sums of ``sb`` and ``sb**2``.

While a batch is set (``VllmScheduler.steady``), the running requests' own ``length``,
``computed`` and ``generated`` are stale. :func:`sync` writes them back, and everything
that reads or changes running requests other than runs and :func:`steady_step` calls it
first (``VllmScheduler.run_pass`` when the pass is not steady, ``cancel``, the handoff
commands).

:func:`steady_step` is the first half of ``VllmScheduler.run_pass`` for such a batch: it
schedules every member as ``_schedule_running`` would (one token each, block steps in batch
order, completions left for ``_emit``) without touching the others. Admission, prefill
pricing and ``_emit`` then run as usual; :func:`after_step` adds the newly admitted requests
to the batch, or syncs when one of them is not a plain decoder yet.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim_vllm.request import VllmRequest
    from servesim_vllm.scheduler import VllmScheduler


class SteadyBatch:
    """The running batch of a steady rank (see the module docstring)."""

    __slots__ = ("running", "P", "bs", "m", "sum_b", "sum_b2", "cross", "ends", "end_heap",
                 "rids", "serial")

    def __init__(self, running: list[VllmRequest], bs: int) -> None:
        self.running = running
        self.P = 0
        self.bs = bs
        self.m = 0
        self.sum_b = 0
        self.sum_b2 = 0
        self.cross: list[tuple[int, int, VllmRequest]] = []
        self.ends: dict[int, list[VllmRequest]] = {}
        self.end_heap: list[int] = []
        self.rids: list[int] = []
        self.serial = 0

    @classmethod
    def build(cls, running: list[VllmRequest], bs: int, limit: int) -> SteadyBatch | None:
        """From the requests' own counters; None when a member is not a plain decoder, or
        could outgrow the pool (``limit`` tokens: readmission could reject it)."""
        for req in running:
            if req.computed != req.length - 1 or not req.generated:
                return None
            if req.prompt_len + req.max_out > limit or req.generated >= req.max_out:
                return None
        batch = cls(running, bs)
        batch.add(running)
        batch.rids = [req.rid for req in running]
        return batch

    def add(self, reqs: list[VllmRequest]) -> None:
        """Members joining at the end of the batch, their own counters current at ``P``."""
        P, bs = self.P, self.bs
        cross, ends = self.cross, self.ends
        serial = self.serial
        sum_b = sum_b2 = 0
        for req in reqs:
            length = req.length
            b = length - P
            end = P + req.max_out - req.generated
            req.sb = b
            req.se = end
            req.sn = serial
            sum_b += b
            sum_b2 += b * b
            r = length % bs
            first = P if r <= 1 else P + bs - r
            if first < end:
                heapq.heappush(cross, (first, serial, req))
            serial += 1
            bucket = ends.get(end)
            if bucket is None:
                ends[end] = [req]
                heapq.heappush(self.end_heap, end)
            else:
                bucket.append(req)
        self.serial = serial
        self.m += len(reqs)
        self.sum_b += sum_b
        self.sum_b2 += sum_b2

    def sums(self, P: int) -> tuple[int, int]:
        """Summed lengths and squared lengths of the members before pass ``P``."""
        sb = self.sum_b
        return sb + self.m * P, self.sum_b2 + 2 * P * sb + self.m * P * P

    def pop_crossings(self, P: int) -> list[VllmRequest]:
        """The members with a block step in pass ``P``, in batch order (taken off the heap:
        :meth:`step_done` puts their next one back, :meth:`unpop` restores them)."""
        cross = self.cross
        due = []
        while cross and cross[0][0] == P:
            due.append(heapq.heappop(cross)[2])
        return due

    def unpop(self, P: int, due: list[VllmRequest]) -> None:
        for req in due:
            heapq.heappush(self.cross, (P, req.sn, req))

    def step_done(self, P: int, req: VllmRequest, length: int) -> None:
        """After ``req``'s block step in pass ``P`` at pre-pass length ``length``: queue its
        next one (the following pass after a block filled, else the next block edge)."""
        bs = self.bs
        nxt = P + 1 if bs == 1 or length % bs == 0 else P + bs - 1
        if nxt < req.se:
            heapq.heappush(self.cross, (nxt, req.sn, req))

    def finish(self, end: int) -> list[VllmRequest]:
        """Remove the members whose last pass was ``end - 1``; returns them (batch order)."""
        done = self.ends.pop(end)
        heap = self.end_heap
        if heap and heap[0] == end:
            heapq.heappop(heap)
        else:
            heap.remove(end)
            heapq.heapify(heap)
        sum_b = sum_b2 = 0
        for req in done:
            b = req.sb
            sum_b += b
            sum_b2 += b * b
        self.m -= len(done)
        self.sum_b -= sum_b
        self.sum_b2 -= sum_b2
        return done

    def write_back(self, members: list[VllmRequest]) -> None:
        """Set the members' own counters to their values now."""
        P = self.P
        for req in members:
            length = req.sb + P
            req.length = length
            req.computed = length - 1
            req.generated = req.max_out - (req.se - P)


def sync(s: VllmScheduler) -> None:
    """Write the batch's counters back into the running requests and drop the batch."""
    batch = s.steady
    if batch is None:
        return
    s.steady = None
    if batch.running is not s.running or batch.m != len(s.running):
        raise RuntimeError("vllm rank: the steady batch lost track of the running list")
    batch.write_back(s.running)


def block_step(s: VllmScheduler, req: VllmRequest, length: int) -> None:
    """What ``VllmScheduler._schedule`` does to the pool for a one-token decode step of a
    request whose pre-pass length is ``length`` (its allocation cannot fail here)."""
    bs = s.bs
    table = req.table
    target = -(-length // bs)
    if target > len(table.ids):
        if not s.pool.allocate(table, target, ()):
            raise RuntimeError(f"vllm rank: allocation for request {req.rid} failed despite headroom")
    if s.caching:
        full = length // bs
        if full > table.num_cached:
            seq = req.finalize_seq(full, bs, s.lazy_hashes and req.request.output_token_ids is None)
            tokens = None
            if s.token_ids_in_events:
                tokens = lambda i: req.tokens(i * bs, (i + 1) * bs)  # noqa: E731
            s.pool.finalize(table, full, seq, req.loc, tokens)


def growth(due: list[VllmRequest], P: int, bs: int) -> int:
    """Blocks the block steps of ``due`` in pass ``P`` allocate."""
    need = 0
    for req in due:
        grow = -(-(req.sb + P) // bs) - len(req.table.ids)
        if grow > 0:
            need += grow
    return need


def steady_step(s: VllmScheduler) -> bool:
    """Schedule the running batch of this pass from the steady batch, as
    ``_schedule_running`` would; False, having changed nothing, when the pass is not a
    steady one (handoff state, or an allocation that could fail and must preempt)."""
    batch = s.steady
    running = s.running
    if batch.running is not running:
        raise RuntimeError("vllm rank: the steady batch lost track of the running list")
    book = s.book
    if book is not None and (book.sources or book.dests or book.events or book.blocks_admission):
        return False
    m = batch.m
    if m == 0 or m > s.max_tokens:
        return False
    P = batch.P
    due = batch.pop_crossings(P)
    if due:
        pool = s.pool
        if growth(due, P, s.bs) > len(pool._free) + len(pool._evict):  # noqa: SLF001
            batch.unpop(P, due)
            return False
        for req in due:
            length = req.sb + P
            block_step(s, req, length)
            batch.step_done(P, req, length)
    res = s._res  # noqa: SLF001 - the pass being built
    res.order = running[:]
    res.token_rids = batch.rids[:]
    finishing = batch.ends.get(P + 1)
    if finishing:  # this pass's token is their last (completed in _emit)
        res.later = finishing[:]
    total, sq = batch.sums(P)
    res.plain = [m, total, sq]
    s._budget = s.max_tokens - m  # noqa: SLF001
    return True


def after_step(s: VllmScheduler) -> None:
    """After a pass begun by :func:`steady_step`: the running list is the surviving members
    followed by the requests admitted in the pass. Keep the batch when every newcomer is a
    plain decoder now; otherwise sync the members and drop it."""
    batch = s.steady
    batch.P += 1
    P = batch.P
    if P in batch.ends:
        rids = batch.rids[:]
        for req in batch.finish(P):
            rids.remove(req.rid)
        batch.rids = rids
    survivors = batch.m
    running = s.running
    if len(running) < survivors:
        raise RuntimeError("vllm rank: the steady batch lost track of the running list")
    batch.running = running
    new = running[survivors:]
    if not new:
        return
    limit = s.usable_blocks * s.bs
    for req in new:
        if (req.computed != req.length - 1 or not req.generated
                or req.prompt_len + req.max_out > limit or req.generated >= req.max_out):
            # The newcomers' own counters are current: write back the members' and drop it.
            s.steady = None
            batch.write_back(running[:survivors])
            return
    batch.add(new)
    batch.rids = batch.rids + [req.rid for req in new]


__all__ = ["SteadyBatch", "after_step", "block_step", "growth", "steady_step", "sync"]
