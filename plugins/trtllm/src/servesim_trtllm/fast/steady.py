"""The steady batch kept between runs and steps, with its members' counters held lazily.

After a run of steady decode passes (servesim_trtllm.fast.runs) every running request is a plain
decode: its context is computed and its newest sampled token is the one left to compute.
:class:`TrtSteadyBatch` holds that batch lazily (servesim.fast.steady.SteadyBatch): before pass
``P`` a member has computed ``sb + P - 1`` tokens and generated ``sb + P - prompt_len``; its
block steps are the decodes that allocate a block (the target ``sb + P`` passes the table)
or fill one, and serials follow the order the policy walks the batch in
(:func:`servesim_trtllm.fast.runs.batch_order`).

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

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from servesim._compiled import mypyc_attr
from servesim.fast.steady import SteadyBatch

from servesim_trtllm.interfaces import CoreView

if TYPE_CHECKING:
    from servesim.contract import OutputBatch

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


# A class of another distribution's compiled module cannot be a native base: the compiled
# build keeps this subclass a plain Python class (its methods and this module's functions are
# still compiled).
@mypyc_attr(native_class=False)
class TrtSteadyBatch(SteadyBatch):
    """The running batch of a steady trtllm rank: a member's next block step is its next
    allocation or filled block (:func:`next_event`)."""

    __slots__ = ("caching",)

    def __init__(self, bs: int, caching: bool) -> None:
        super().__init__(bs)
        self.caching = caching

    def length(self, r: TrtRequest) -> int:
        return r.prompt_len + r.generated

    def left(self, r: TrtRequest) -> int:
        return r.max_output - r.generated

    def first_step(self, r: TrtRequest, length: int) -> int:
        return next_event(length - 1, len(r.table.ids), self.bs, self.caching)

    def next_step(self, r: TrtRequest, P: int) -> int:
        return P + 1 + next_event(r.sb + P, len(r.table.ids), self.bs, self.caching)

    def write(self, r: TrtRequest, length: int, left: int) -> None:
        r.num_computed = length - 1
        r.generated = length - r.prompt_len


class SteadyCore(CoreView, Protocol):
    """The core as the fast paths see it: :class:`CoreView` with the steady batch
    (``TrtCore.steady``, None while none is kept)."""

    steady: TrtSteadyBatch | None


def pass_steps(core: SteadyCore) -> tuple[Callable[[list[TrtRequest], int], bool],
                                        Callable[[list[TrtRequest], int], None]]:
    """``(blocked, step)`` for :meth:`SteadyBatch.step_pass`: a pass's block steps are left
    to stepping when the blocks its decodes allocate (one each at most) could run short,
    and are otherwise :func:`block_steps`."""
    pool = core.pool
    bs = core.bs

    def blocked(due: list[TrtRequest], P: int) -> bool:
        need = 0
        for r in due:
            if r.sb + P > len(r.table.ids) * bs:
                need += 1
        # the blocks an allocation can take: free ones and cached ones nothing references
        return need > pool.num_free + pool.num_inactive

    def step(due: list[TrtRequest], P: int) -> None:
        block_steps(core, due, P)

    return blocked, step


def block_steps(core: SteadyCore, due: list[TrtRequest], P: int) -> None:
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
                core.finalize(r, target // bs)  # the stepping path's call
    for r in fin:
        full = (r.sb + P) // bs
        if full > r.table.num_cached:
            core.finalize(r, full)


def steady_step(core: SteadyCore, budget: float) -> int | None:
    """The running requests' share of a guaranteed-no-evict step from the batch: their block
    steps for this pass, in batch order. Returns how many members were scheduled (one token
    each), or None, having changed nothing, when the step is not that simple (the batch
    exceeds the token budget, or an allocation could fail)."""
    batch = core.steady
    assert batch is not None  # the caller steps this way only while a steady batch is kept
    m = batch.m
    if m == 0 or m > budget or m != len(core.running):
        return None
    if not batch.step_pass(batch.P, *pass_steps(core)):
        return None
    return m


def emit_members(core: SteadyCore, out: OutputBatch) -> None:
    """The members' emission in this step (before any newcomer's): every member samples one
    token; those whose last token it was leave the batch and the rank (``TrtCore.remove``,
    in batch order, as ``TrtCore.emit``)."""
    batch = core.steady
    assert batch is not None  # only in a step steady_step began
    out.token_request_ids.extend(batch.rids)
    batch.P += 1
    P = batch.P
    if P in batch.ends:
        completed = out.completed
        for r in batch.finish(P):
            batch.write(r, r.sb + P, 0)
            core.remove(r)
            completed.append(r.rid)


def after_step(core: SteadyCore, work: StepWork) -> None:
    """After a step begun by :func:`steady_step`: add the requests it admitted to the batch
    when every one of them is a plain decode now, else write back and drop the batch."""
    batch = core.steady
    assert batch is not None  # only after a step steady_step began
    new = [r for r, _, _, _ in work.contexts if r.started and r.rid in core.running]
    if not new:
        return
    for r in new:
        if not is_plain_decode(r):
            core.sync()
            return
    batch.add(new)


__all__ = ["SteadyCore", "TrtSteadyBatch", "after_step", "block_steps", "emit_members", "is_plain_decode",
           "next_event", "pass_steps", "steady_step"]
