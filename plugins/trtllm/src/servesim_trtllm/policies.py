"""The three capacity-scheduler policies and TensorRT-LLM's micro-batch scheduler.

* ``guaranteed_no_evict`` — :func:`schedule_reference`, exactly the reference
  (dynamo-mocker.md §6 on the vLLM-style pass of §2.2-§2.3): running requests first in
  admission order within the token budget, then FIFO admission while
  ``needed ≤ available`` with ``available = (num_gpu_blocks − active_blocks) −
  Σ_running blocks_needed_to_finish``; strict head-of-line blocking; no preemption ever.
* ``static_batch`` — :func:`schedule_static_batch`. TensorRT-LLM's ``StaticBatchScheduler``
  is ``GuaranteedNoEvictScheduler::impl<true>`` (``capacityScheduler.cpp``): the same
  reservation to completion, but pending requests are considered only when no request is
  in flight. servesim asks "no request of the current batch is still running" where the
  source asks "no generation-in-progress request": the two agree without chunked context;
  with it, the source lets new requests join a batch whose members are mid-context and
  stalls those members behind generating ones, which servesim does not reproduce. The
  reservation uses the reference's ``blocks_needed_to_finish`` (dynamo-mocker.md §6),
  crediting prefix blocks other requests already hold.
* ``max_utilization`` — :func:`schedule_max_utilization`, TensorRT-LLM's
  ``MaxUtilizationScheduler``: walk the active list (submission order) and schedule each
  request whose *next step* fits the free blocks (``getNeededBlocksOneStep`` against
  ``schedulingHasFreeBlocks``; cached-but-unreferenced blocks count as free). When one does
  not fit, pause the **last started request from the end of the not-yet-visited part of
  the list** (``std::find_if`` over ``[reqIt, reqItEnd)`` reversed — possibly the request
  itself), shrink the list's end to it and retry. Reaching ``max_batch_size`` also counts
  as "does not fit", as in the source. Paused requests emit ``PressureKind.TRTLLM_PAUSE``.

Native policies then run :func:`micro_batch`, TensorRT-LLM's ``MicroBatchScheduler``
(``microBatchScheduler.cpp``; ``PyMicroBatchScheduler`` in ``_torch/pyexecutor/scheduler.py``
is its Python port): in list order a generation request costs one token and stops the walk
when the budget is exceeded; a context request without chunking costs its remaining context
and also stops the walk; with chunking every context is collected and, if they do not all
fit after the generation tokens, chunked by ``first_come_first_served`` (a truncated chunk is
rounded down to the chunk unit = block size) or ``equal_progress``. Every scheduled request
counts against ``max_batch_size``. Contexts run before generations (``sortRequests``).

``max_utilization`` also applies ``beneficialToSkip``: a context not yet started is skipped
for this step when the first block it would have to compute is the first new block of a
context already in flight or scheduled earlier in the walk, so that it reuses that block
next step instead of computing it twice. (TensorRT-LLM's GNE applies it too; servesim's GNE
does not, to stay exact with the reference; the static batch never does, as in the source.)

Not modelled: LoRA/PEFT pages, beams, draft tokens.
"""

from __future__ import annotations

import math

from servesim_trtllm.config import ContextChunkingPolicy
from servesim_trtllm.core import TrtCore
from servesim_trtllm.request import TrtRequest
from servesim_trtllm.work import StepWork

INF = math.inf
_NO_END = 1 << 62  # list positions are submission counters, always smaller


def _budget(core: TrtCore) -> float:
    limit = core.limits.max_num_tokens
    return INF if limit is None else float(limit)


def _max_batch(core: TrtCore) -> float:
    limit = core.limits.max_batch_size
    return INF if limit is None else float(limit)


# --------------------------------------------------------------------------- GNE (reference)


def _schedule_request(core: TrtCore, r: TrtRequest, budget: float, work: StepWork) -> int | None:
    """dynamo-mocker.md §2.3; None means Blocked."""
    before = r.cached_tokens if not r.started else r.num_computed
    remaining = r.seq_len - before
    prompt_remaining = r.ctx_len - min(before, r.ctx_len)
    if not core.limits.chunked_context and 0 < prompt_remaining and prompt_remaining > budget:
        return None
    desired = int(min(remaining, budget))
    if desired == 0 and remaining > 0:
        return None
    if not core.advance(r, desired, work):
        return None  # GNE never runs out (reservation); counted in core.allocation_failures
    return desired


def schedule_reference(core: TrtCore, work: StepWork) -> None:
    admit_reference(core, work, _schedule_running_reference(core, work))


def _schedule_running_reference(core: TrtCore, work: StepWork) -> float:
    """The running requests in admission order while the budget lasts; the budget left."""
    budget = _budget(core)
    bs = core.bs
    scheduled, tokens = work.scheduled, work.tokens
    for r in list(core.running.values()):
        if budget <= 0:
            break
        computed = r.num_computed
        if computed >= r.ctx_len:  # decoding: its dangling token (the hot path)
            target = computed + 1
            if target % bs and target <= len(r.table.ids) * bs:
                # Inside an allocated, not-yet-full block: nothing to allocate or publish.
                r.num_computed = target
                scheduled.append(r)
                tokens.append(1)
            elif not core.decode_step(r, work):
                break
            budget -= 1
            continue
        used = _schedule_request(core, r, budget, work)
        if used is None:
            break
        budget -= used
    return budget


def admit_reference(core: TrtCore, work: StepWork, budget: float) -> None:
    """FIFO admission while the reservation check passes (strict head-of-line blocking)."""
    max_batch = _max_batch(core)
    while core.waiting and len(core.running) < max_batch:
        r = next(iter(core.waiting.values()))
        if r.reject or r.total_blocks > core.num_blocks:
            core.reject(r, work)
            continue
        needed, cached, _ = core.fresh_blocks_needed(r)
        if needed > core.reserved_available():
            break
        core.set_cached(r, cached)
        used = _schedule_request(core, r, budget, work)
        if used is None:
            r.cached_tokens = 0
            break
        budget -= used
        if used == 0 and budget == 0:
            break


# --------------------------------------------------------------------------- static batch


def schedule_static_batch(core: TrtCore, work: StepWork) -> None:
    max_batch = _max_batch(core)
    fitting: list[TrtRequest] = []
    for r in core.running.values():
        if len(fitting) >= max_batch:
            break
        fitting.append(r)
    if not core.running:
        available = core.reserved_available()
        rejects: list[TrtRequest] = []
        for r in core.waiting.values():
            if len(fitting) >= max_batch:
                break
            if r.reject or r.total_blocks > core.num_blocks:
                rejects.append(r)
                continue
            needed, _, _ = core.fresh_blocks_needed(r)
            if needed > available:
                break
            available -= needed
            fitting.append(r)
        for r in rejects:
            core.reject(r, work)
    micro_batch(core, fitting, work)


# --------------------------------------------------------------------------- max utilization


def _one_step_blocks(core: TrtCore, r: TrtRequest) -> int:
    """Blocks the request's next step takes from the free pool (``getNeededBlocksOneStep``).

    A context's first chunk allocates the whole context, minus blocks already referenced
    by other requests; a later chunk needs none; a generation step needs the block of its
    dangling token when it starts a new one. (TensorRT-LLM counts the block of the token
    the step will produce, because it allocates one token ahead; servesim allocates a
    token's block in the step that computes it, and counts exactly what that step takes.)
    """
    bs = core.bs
    if r.started:
        if r.num_computed < r.ctx_len:
            return 0
        return max(0, -(-r.seq_len // bs) - len(r.table))
    _, active = core.lookup(r)
    return max(0, -(-r.ctx_len // bs) - active)


def _contexts_in_flight(core: TrtCore) -> set[int] | None:
    """First not-yet-cached block of every context still being computed
    (``prefillWithChunkedContextsAlreadyExecuting``); None when nothing is reusable."""
    if not core.pool.prefix_caching:
        return None
    out: set[int] = set()
    for r in core.running.values():
        if r.num_computed < r.ctx_len:
            h = core.first_new_block(r)
            if h is not None:
                out.add(h)
    return out


def _last_started(core: TrtCore, first: int, end: int) -> TrtRequest | None:
    """The started request with the largest list position in ``[first, end)``."""
    best: TrtRequest | None = None
    for r in core.running.values():
        if first <= r.order < end and (best is None or r.order > best.order):
            best = r
    return best


def schedule_max_utilization(core: TrtCore, work: StepWork, now_ms: float) -> None:
    """Walks the active list lazily: it stops at ``max_batch_size`` or at the first request
    that cannot fit once no started request is left behind it, so a long waiting queue
    costs nothing per step. The victim search scans the running requests only."""
    max_batch = _max_batch(core)
    bs = core.bs
    fitting: list[TrtRequest] = []
    rejects: list[TrtRequest] = []
    scheduled_blocks = 0
    free = core.num_blocks - core.pool.num_active
    end = _NO_END
    stop = False
    contributed = _contexts_in_flight(core)
    for r in core.reqs.values():
        if stop or r.order >= end:
            break
        if r.reject:
            rejects.append(r)
            continue
        if not r.started and contributed is not None:
            h = core.first_new_block(r)
            if h is not None:
                if h in contributed:
                    continue  # beneficialToSkip: reuse the block next step instead
                contributed.add(h)
        while True:
            if r.started and r.num_computed >= r.ctx_len:  # decoding: inline for speed
                need = (r.prompt_len + r.generated + bs - 1) // bs - len(r.table.ids)
            else:
                need = _one_step_blocks(core, r)
            if len(fitting) < max_batch and scheduled_blocks + need <= free:
                fitting.append(r)
                scheduled_blocks += need
                break
            victim = _last_started(core, r.order, end)
            if victim is None:
                stop = True
                break
            core.pause(victim, work, now_ms)
            free = core.num_blocks - core.pool.num_active
            end = victim.order
            if victim is r:
                stop = True
                break
    for r in rejects:
        core.reject(r, work)
    micro_batch(core, fitting, work)


# --------------------------------------------------------------------------- micro batch


def _chunk_fcfs(rems: list[int], capacity: float, unit: int) -> list[int]:
    sizes = [0] * len(rems)
    for k, rem in enumerate(rems):
        size = rem if capacity >= rem else int(capacity)
        if size < rem:
            size = size // unit * unit
        sizes[k] = size
        capacity -= size
        if capacity <= 0:
            break
    return sizes


def _chunk_equal_progress(rems: list[int], capacity: float, unit: int) -> list[int]:
    sizes = [0] * len(rems)
    total = 0
    progress = True
    while total < capacity and progress:
        progress = False
        for k, rem in enumerate(rems):
            inc = min(unit, rem - sizes[k])
            if inc <= 0 or total + inc > capacity:
                continue
            sizes[k] += inc
            total += inc
            progress = True
    return sizes


def _context_remaining(core: TrtCore, r: TrtRequest) -> int:
    if not r.started:
        cached, _ = core.lookup(r)
        core.set_cached(r, cached)
        return r.ctx_len - r.cached_tokens
    return r.ctx_len - r.num_computed


def micro_batch(core: TrtCore, fitting: list[TrtRequest], work: StepWork) -> None:
    budget = _budget(core)
    max_batch = _max_batch(core)
    chunked = core.limits.chunked_context
    generation: list[TrtRequest] = []
    contexts: list[TrtRequest] = []
    rems: list[int] = []
    batch_tokens = 0
    count = 0
    for r in fitting:
        if r.started and r.num_computed >= r.ctx_len:
            if batch_tokens + 1 > budget:
                break
            generation.append(r)
            batch_tokens += 1
        else:
            rem = _context_remaining(core, r)
            if not chunked:
                # A lone over-long context still runs, so a resumed request whose context
                # grew past the budget cannot stall the rank.
                if batch_tokens + rem > budget and (batch_tokens or count):
                    break
                batch_tokens += rem
            contexts.append(r)
            rems.append(rem)
        count += 1
        if count >= max_batch:
            break
    sizes = rems
    if chunked and sum(rems) > budget - batch_tokens:
        unit = core.bs
        if core.trt.context_chunking_policy is ContextChunkingPolicy.EQUAL_PROGRESS:
            sizes = _chunk_equal_progress(rems, budget - batch_tokens, unit)
        else:
            sizes = _chunk_fcfs(rems, budget - batch_tokens, unit)
    for r, size in zip(contexts, sizes, strict=True):
        if size > 0:
            core.advance(r, size, work)
        elif not r.started:
            r.cached_tokens = 0
    bs = core.bs
    scheduled, tokens = work.scheduled, work.tokens
    for r in generation:
        target = r.num_computed + 1
        if target % bs and target <= len(r.table.ids) * bs:  # in-block: the hot path
            r.num_computed = target
            scheduled.append(r)
            tokens.append(1)
        else:
            core.decode_step(r, work)
    core.flush_finalize(work)
