"""Speculative decoding on the ``vllm`` rank (dynamo-mocker.md §8.1; aisimulate-engine.md §10).

With ``engine.aic_nextn`` set, :func:`emit` replaces the one-token sampling step of
``VllmScheduler._emit``:

1. requests whose known tokens are all computed and whose generation is complete finish
   without a token, as in plain decoding;
2. the decode blocks of every other ready request's largest burst
   (``min(aic_nextn + 1, remaining)``; 1 on a prefill worker) are reserved at once, before
   any token is sampled; when the pool cannot supply them the scheduler preempts (LIFO or
   FIFO) and reserves again for the requests still running;
3. the verification forward is priced as one decode pass over the ready requests, exactly
   as a plain decode step would be (the reference prices its polynomial model the same
   way: acceptance changes the tokens a step emits, not its cost);
4. each request draws its burst (servesim.mechanics.speculative.SpeculativeSampler) and emits it:
   every token of the burst carries the pass's end time. A request that is not finished
   keeps exactly one dangling token (``computed = length - 1``), which the next pass
   schedules as a one-token decode; the blocks it was given cover that token, and the
   reservation's unused blocks go back to the free list.

The reference also recomputes one more block of every non-empty prefix-cache hit (the
drafter needs the hidden states of the last matched block), applied in
``VllmScheduler.prefill_cost``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.kv.pool import BlockTable

from servesim_vllm.request import Status, VllmRequest

if TYPE_CHECKING:
    from collections.abc import Callable

    from servesim_vllm.interfaces import SchedulerView
    from servesim_vllm.pass_result import PassResult


def emit(s: SchedulerView, res: PassResult) -> None:
    """Sample and emit every ready request's burst (see the module docstring)."""
    spec = s.spec
    assert spec is not None
    res.token_rids = []
    ready = _finish_terminal(s, res)
    if not ready:
        return
    ready, reserved = _reserve(s, ready, spec.largest_burst)
    if reserved is None:
        return
    # Unlike a plain step, the verification forward covers the requests that just
    # prefilled too: their first burst is verified like any other (as the reference prices it).
    if not spec.prefill_worker:  # a prefill worker's tokens come out of the prefill forward
        s.decode_time(res, len(ready), sum(req.length for req in ready))
    bursts = [spec.draw_burst(req.max_out - req.generated) for req in ready]
    finished = False
    for req, burst in zip(ready, bursts, strict=True):
        finished |= _emit_burst(s, res, req, burst, reserved)
    if reserved.ids:
        s.pool.release(reserved)
    if finished:
        s.running[:] = [r for r in s.running if r.status is Status.RUNNING]


def _finish_terminal(s: SchedulerView, res: PassResult) -> list[VllmRequest]:
    """Forward-pass-metric tallies, completions without a token, and the ready requests
    (all known tokens computed, output left), in batch order."""
    n = total = sq = 0
    ready: list[VllmRequest] = []
    finished = False
    work = res.work
    for req in res.later:
        w = work.get(req.rid)
        length = req.length
        terminal = req.generated >= req.max_out
        if (w is None or w.prompt_tokens == 0) and not terminal:
            n += 1
            total += length
            sq += length * length
        if req.computed < length:
            continue
        if terminal:
            res.completed.append(req.rid)
            if w is not None:
                w.terminal = True
            s.finish(req, res)
            finished = True
            continue
        ready.append(req)
    res.decode_stats = (n, total, sq)
    if finished:
        s.running[:] = [r for r in s.running if r.status is Status.RUNNING]
    return ready


def _reserve(
    s: SchedulerView, ready: list[VllmRequest], largest: Callable[[int], int]
) -> tuple[list[VllmRequest], BlockTable | None]:
    """Reserve the blocks of every ready request's largest burst, preempting until they fit;
    ``(still ready, reservation)``, or ``([], None)`` when nothing is left to run."""
    bs = s.bs
    while True:
        need = 0
        for req in ready:
            burst = largest(req.max_out - req.generated)
            need += -(-(req.length + burst) // bs) - -(-req.length // bs)
        reserved = BlockTable()
        if s.pool.allocate(reserved, need):
            return ready, reserved
        victim = s.victim()
        if victim is None:
            return [], None
        s.preempt(victim)
        ready = [r for r in ready if r.status is Status.RUNNING]
        if not ready:
            return [], None


def _emit_burst(
    s: SchedulerView, res: PassResult, req: VllmRequest, burst: int, reserved: BlockTable
) -> bool:
    """Emit ``burst`` tokens of ``req`` at the pass end; True when it finished."""
    rid = req.rid
    if not req.cached_signaled:
        req.cached_signaled = True
        res.cached_tokens[rid] = req.cached_prefix or 0
    res.token_rids.extend([rid] * burst)
    req.generated += burst
    req.length += burst
    if req.generated >= req.max_out:
        res.completed.append(rid)
        s.finish(req, res)
        return True
    # The burst's blocks come out of the reservation; the last token stays dangling.
    bs = s.bs
    table = req.table
    grow = -(-req.length // bs) - len(table.ids)
    if grow > 0:
        table.ids += reserved.ids[-grow:]
        del reserved.ids[-grow:]
    req.computed = req.length - 1
    if s.caching and req.computed // bs > table.num_cached:
        s.finalize_blocks(req, req.computed // bs)
    return False


__all__ = ["emit"]
