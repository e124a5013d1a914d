"""The steady batch kept between runs and steps, with its members' counters held lazily.

The trtllm counterpart of ``servesim_vllm.steady`` (see there for the idea). After a run of
steady decode passes (servesim_trtllm.runs) every running request is a plain decode: its
context is computed and its newest sampled token is the one left to compute. While that
holds, :class:`SteadyBatch` describes the batch by a pass counter ``P`` and per member two
constants (slots on the request): ``sb``, its sequence length minus ``P``, and ``se``, the
value of ``P`` after its last pass. Before pass ``P`` a member has computed
``sb + P - 1`` tokens and generated ``sb + P - prompt_len``.

* The members whose decode in pass ``P`` allocates a block (its target ``sb + P`` passes the
  table) or fills one are the top of a heap of ``(pass, serial, request)`` entries, one per
  member, in batch order (serials follow the order the policy walks the batch in:
  :func:`servesim_trtllm.runs.batch_order`).
* The members completing with pass ``P`` are ``ends[P + 1]``, in batch order.
* The batch's summed sequence lengths and squares come from the sums of ``sb`` and ``sb**2``.

While a batch is set (``TrtCore.steady``), the running requests' own ``num_computed`` and
``generated`` are stale; :meth:`TrtCore.sync` writes them back, and everything else that
reads or changes running requests calls it first (a step that is not steady, a cancel, a
handoff command, the invariant check).

:func:`steady_step` schedules the running requests of a guaranteed-no-evict step from the
batch, as ``policies.schedule_reference`` would (one token each, block steps in batch order);
the queue is then admitted as usual, and :func:`emit_members` / :func:`after_step` do the
members' share of emission and add the newly admitted requests to the batch.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.contract import OutputBatch

    from servesim_trtllm.core import TrtCore
    from servesim_trtllm.request import TrtRequest
    from servesim_trtllm.work import StepWork


def next_event(c: int, nblocks: int, bs: int, caching: bool) -> int:
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


def is_plain_decode(r: TrtRequest) -> bool:
    """Started, context computed, one sampled token dangling, output left."""
    gen = r.generated
    c = r.num_computed
    return (r.started and c == r.prompt_len + gen - 1 and c >= r.ctx_len and gen > 0
            and gen < r.max_output)


class SteadyBatch:
    """The running batch of a steady trtllm rank (see the module docstring)."""

    __slots__ = ("P", "bs", "caching", "m", "sum_b", "sum_b2", "cross", "ends", "end_heap",
                 "rids", "serial")

    def __init__(self, bs: int, caching: bool) -> None:
        self.P = 0
        self.bs = bs
        self.caching = caching
        self.m = 0
        self.sum_b = 0
        self.sum_b2 = 0
        self.cross: list[tuple[int, int, TrtRequest]] = []
        self.ends: dict[int, list[TrtRequest]] = {}
        self.end_heap: list[int] = []
        self.rids: list[int] = []
        self.serial = 0

    def add(self, reqs: list[TrtRequest]) -> None:
        """Members joining at the end of the batch, their own counters current at ``P``."""
        P, bs, caching = self.P, self.bs, self.caching
        cross, ends = self.cross, self.ends
        serial = self.serial
        sum_b = sum_b2 = 0
        for r in reqs:
            length = r.prompt_len + r.generated
            b = length - P
            end = P + r.max_output - r.generated
            r.sb = b
            r.se = end
            r.sn = serial
            sum_b += b
            sum_b2 += b * b
            first = P + next_event(length - 1, len(r.table.ids), bs, caching)
            if first < end:
                heapq.heappush(cross, (first, serial, r))
            serial += 1
            bucket = ends.get(end)
            if bucket is None:
                ends[end] = [r]
                heapq.heappush(self.end_heap, end)
            else:
                bucket.append(r)
        self.serial = serial
        self.m += len(reqs)
        self.sum_b += sum_b
        self.sum_b2 += sum_b2
        self.rids = self.rids + [r.rid for r in reqs]  # new list: run effects may hold the old

    def sums(self, P: int) -> tuple[int, int]:
        """Summed sequence lengths and squares of the members before pass ``P``."""
        sb = self.sum_b
        return sb + self.m * P, self.sum_b2 + 2 * P * sb + self.m * P * P

    def pop_crossings(self, P: int) -> list[TrtRequest]:
        """The members with a block step in pass ``P``, in batch order (off the heap:
        :meth:`step_done` queues their next one, :meth:`unpop` restores them)."""
        cross = self.cross
        due = []
        while cross and cross[0][0] == P:
            due.append(heapq.heappop(cross)[2])
        return due

    def unpop(self, P: int, due: list[TrtRequest]) -> None:
        for r in due:
            heapq.heappush(self.cross, (P, r.sn, r))

    def step_done(self, P: int, r: TrtRequest) -> None:
        """After ``r``'s block step in pass ``P`` (its table as it is now): queue its next."""
        nxt = P + 1 + next_event(r.sb + P, len(r.table.ids), self.bs, self.caching)
        if nxt < r.se:
            heapq.heappush(self.cross, (nxt, r.sn, r))

    def finish(self, end: int) -> list[TrtRequest]:
        """Remove the members whose last pass was ``end - 1``; returns them (batch order)."""
        done = self.ends.pop(end)
        heap = self.end_heap
        if heap and heap[0] == end:
            heapq.heappop(heap)
        else:
            heap.remove(end)
            heapq.heapify(heap)
        sum_b = sum_b2 = 0
        for r in done:
            b = r.sb
            sum_b += b
            sum_b2 += b * b
        self.m -= len(done)
        self.sum_b -= sum_b
        self.sum_b2 -= sum_b2
        rids = self.rids[:]
        for r in done:
            rids.remove(r.rid)
        self.rids = rids
        return done

    def write_back(self, members: list[TrtRequest]) -> None:
        """Set the members' own counters to their values now."""
        P = self.P
        for r in members:
            length = r.sb + P
            r.num_computed = length - 1
            r.generated = length - r.prompt_len


def growth(core: TrtCore, due: list[TrtRequest], P: int) -> int:
    """Blocks the decodes of ``due`` allocate in pass ``P`` (one each at most)."""
    limit = core.bs
    need = 0
    for r in due:
        if r.sb + P > len(r.table.ids) * limit:
            need += 1
    return need


def block_steps(core: TrtCore, due: list[TrtRequest], P: int) -> None:
    """What ``TrtCore.decode_step`` (and, for native policies, ``flush_finalize``) do to the
    pool in pass ``P`` for the members in ``due`` (batch order); the allocations cannot fail
    (the caller checked the headroom)."""
    bs = core.bs
    pool = core.pool
    caching = pool.prefix_caching
    native = core.native
    fin: list[TrtRequest] = []
    for r in due:
        target = r.sb + P
        table = r.table
        if target > len(table.ids) * bs:
            if not pool.allocate(table, len(table.ids) + 1):
                raise RuntimeError(f"trtllm rank: allocation for request {r.rid} failed despite headroom")
            core.reserved -= 1
        if caching and target % bs == 0:
            if native:
                fin.append(r)
            else:
                core._finalize(r, target // bs)  # noqa: SLF001 - the stepping path's call
    for r in fin:
        full = (r.sb + P) // bs
        if full > r.table.num_cached:
            core._finalize(r, full)  # noqa: SLF001


def steady_step(core: TrtCore, budget: float) -> int | None:
    """The running requests' share of a guaranteed-no-evict step from the batch: their block
    steps for this pass, in batch order. Returns how many members were scheduled (one token
    each), or None, having changed nothing, when the step is not that simple (the batch
    exceeds the token budget, or an allocation could fail)."""
    batch = core.steady
    m = batch.m
    if m == 0 or m > budget or m != len(core.running):
        return None
    P = batch.P
    due = batch.pop_crossings(P)
    if due:
        pool = core.pool
        if growth(core, due, P) > len(pool._free) + len(pool._evict):  # noqa: SLF001
            batch.unpop(P, due)
            return None
        block_steps(core, due, P)
        for r in due:
            batch.step_done(P, r)
    return m


def emit_members(core: TrtCore, out: OutputBatch) -> None:
    """The members' emission in this step (before any newcomer's): every member samples one
    token; those whose last token it was leave the batch and the rank (``TrtCore.remove``,
    in batch order, as ``TrtCore.emit``)."""
    batch = core.steady
    out.token_request_ids.extend(batch.rids)
    batch.P += 1
    P = batch.P
    if P in batch.ends:
        completed = out.completed
        for r in batch.finish(P):
            length = r.sb + P
            r.num_computed = length - 1
            r.generated = length - r.prompt_len
            core.remove(r)
            completed.append(r.rid)


def after_step(core: TrtCore, work: StepWork) -> None:
    """After a step begun by :func:`steady_step`: add the requests it admitted to the batch
    when every one of them is a plain decode now, else write back and drop the batch."""
    batch = core.steady
    new = [r for r, _, _, _ in work.contexts if r.started and r.rid in core.running]
    if not new:
        return
    for r in new:
        if not is_plain_decode(r):
            core.sync()
            return
    batch.add(new)


__all__ = ["SteadyBatch", "after_step", "block_steps", "emit_members", "growth",
           "is_plain_decode", "next_event", "steady_step"]
