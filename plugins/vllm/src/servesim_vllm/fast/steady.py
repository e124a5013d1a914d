"""The vllm rank's steady batch (servesim.fast.steady), kept between runs and passes.

After a run of steady decode passes (servesim_vllm.fast.runs) every running request is a plain
decoder: its prompt is done and one sampled token is left to compute. :class:`VllmSteadyBatch`
holds that batch lazily (servesim.fast.steady.SteadyBatch): a member's block steps fall where its
pre-pass length ``L`` has ``L % bs`` 0 (a block fills: :meth:`BlockPool.finalize`) or 1 (it
needs a new block: :meth:`BlockPool.allocate`), one after the other at a block edge.

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from servesim._compiled import mypyc_attr
from servesim.fast.steady import SteadyBatch

from servesim_vllm.interfaces import SchedulerView

if TYPE_CHECKING:
    from servesim_vllm.request import VllmRequest


# A class of another distribution's compiled module cannot be a native base: the compiled
# build keeps this subclass a plain Python class (its methods and this module's functions are
# still compiled).
@mypyc_attr(native_class=False)
class VllmSteadyBatch(SteadyBatch):
    """The running batch of a steady vllm rank; ``running`` is the scheduler's list."""

    __slots__ = ("running",)

    def __init__(self, running: list[VllmRequest], bs: int) -> None:
        # Block steps at block edges (allocate at L % bs == 1, finalize at 0): core's own
        # cadence (servesim.fast.steady.edge_step_after), so no first_step/next_step hooks here.
        super().__init__(bs, edge_steps=True)
        self.running = running

    @classmethod
    def build(cls, running: list[VllmRequest], bs: int, limit: int) -> VllmSteadyBatch | None:
        """From the requests' own counters; None when a member is not a plain decoder, or
        could outgrow the pool (``limit`` tokens: readmission could reject it)."""
        for req in running:
            if not _plain_decoder(req, limit):
                return None
        batch = cls(running, bs)
        batch.add(running)
        return batch

    def length(self, r: VllmRequest) -> int:
        return r.length

    def left(self, r: VllmRequest) -> int:
        return r.max_out - r.generated

    def write(self, r: VllmRequest, length: int, left: int) -> None:
        r.length = length
        r.computed = length - 1
        r.generated = r.max_out - left


class SteadyScheduler(SchedulerView, Protocol):
    """The scheduler as the fast paths see it: :class:`SchedulerView` with the steady batch
    (``VllmScheduler.steady``, None while none is kept)."""

    steady: VllmSteadyBatch | None


def _plain_decoder(req: VllmRequest, limit: int) -> bool:
    return (req.computed == req.length - 1 and req.generated > 0
            and req.generated < req.max_out and req.prompt_len + req.max_out <= limit)


def sync(s: SteadyScheduler) -> None:
    """Write the batch's counters back into the running requests and drop the batch."""
    batch = s.steady
    if batch is None:
        return
    s.steady = None
    if batch.running is not s.running or batch.m != len(s.running):
        raise RuntimeError("vllm rank: the steady batch lost track of the running list")
    batch.write_back(s.running)


def block_step(s: SteadyScheduler, req: VllmRequest, length: int) -> None:
    """What ``VllmScheduler._schedule`` does to the pool for a one-token decode step of a
    request whose pre-pass length is ``length`` (its allocation cannot fail here)."""
    bs = s.bs
    table = req.table
    target = -(-length // bs)
    if target > len(table.ids):
        if not s.pool.allocate(table, target, ()):
            raise RuntimeError(f"vllm rank: allocation for request {req.rid} failed despite headroom")
    if s.caching and length // bs > table.num_cached:
        s.finalize_blocks(req, length // bs)


def pass_steps(s: SteadyScheduler) -> tuple[Callable[[list[VllmRequest], int], bool],
                                           Callable[[list[VllmRequest], int], None]]:
    """``(blocked, step)`` for :meth:`SteadyBatch.step_pass`: a pass's block steps are left
    to stepping when the blocks they allocate could run short (it would preempt), and are
    otherwise :func:`block_step` for each member."""
    pool = s.pool
    bs = s.bs

    def blocked(due: list[VllmRequest], P: int) -> bool:
        # the blocks an allocation can take: free ones and cached ones nothing references
        if len(due) <= pool.num_free + pool.num_inactive:
            # A member's block step allocates at most one block (its length grows by one a
            # pass; block_step raises if an allocation fails): headroom for all of them.
            return False
        need = 0
        for req in due:
            grow = -(-(req.sb + P) // bs) - len(req.table.ids)
            if grow > 0:
                need += grow
        return need > pool.num_free + pool.num_inactive

    def step(due: list[VllmRequest], P: int) -> None:
        for req in due:
            block_step(s, req, req.sb + P)

    return blocked, step


def steady_step(s: SteadyScheduler) -> bool:
    """Schedule the running batch of this pass from the steady batch, as
    ``_schedule_running`` would; False, having changed nothing, when the pass is not a
    steady one (handoff state, or an allocation that could fail and must preempt)."""
    batch = s.steady
    assert batch is not None  # the caller steps this way only while a steady batch is kept
    running = s.running
    if batch.running is not running:
        raise RuntimeError("vllm rank: the steady batch lost track of the running list")
    book = s.book
    if book is not None and not book.only_active:
        return False
    m = batch.m
    if m == 0 or m > s.max_tokens:
        return False
    P = batch.P
    if not batch.step_pass(P, *pass_steps(s)):
        return False
    res = s.result  # the pass being built
    res.order = running[:]
    res.token_rids = batch.rids[:]
    finishing = batch.ends.get(P + 1)
    if finishing:  # this pass's token is their last (completed in _emit)
        res.later = finishing[:]
    total, sq = batch.sums(P)
    res.plain = [m, total, sq]
    s.budget = s.max_tokens - m
    return True


def after_step(s: SteadyScheduler) -> None:
    """After a pass begun by :func:`steady_step`: the running list is the surviving members
    followed by the requests admitted in the pass. Keep the batch when every newcomer is a
    plain decoder now; otherwise sync the members and drop it."""
    batch = s.steady
    assert batch is not None  # only after a pass steady_step began
    batch.P += 1
    P = batch.P
    if P in batch.ends:
        batch.finish(P)
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
        if not _plain_decoder(req, limit):
            # The newcomers' own counters are current: write back the members' and drop it.
            s.steady = None
            batch.write_back(running[:survivors])
            return
    batch.add(new)


__all__ = [
    "SteadyScheduler", "VllmSteadyBatch", "after_step", "block_step", "pass_steps", "steady_step", "sync",
]
