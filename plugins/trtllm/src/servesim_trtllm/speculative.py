"""Speculative decoding on the ``trtllm`` rank (dynamo-mocker.md §8.1).

The reference runs TensorRT-LLM's guaranteed-no-evict policy on its vLLM-style core, so a
step verifies bursts as the vllm rank does (servesim_vllm.speculative): the blocks of every
ready request's largest burst (``min(aic_nextn + 1, remaining)``; 1 on a prefill worker) are
taken before sampling, and when the pool cannot supply them the step emits nothing, as the
policy never preempts; the verification forward is priced as one decode pass over every
ready request that still has output left, the requests that just ran their context
included; a burst's tokens share the step's end time; a request that is not finished keeps
one dangling token (``num_computed = length - 1``) inside the blocks its burst took. Unlike
vLLM, no extra prefix block is recomputed (the reference applies that rule to vLLM only).
Only the guaranteed-no-evict policy is modelled (servesim_trtllm.config refuses the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import OutputBatch, RequestId

if TYPE_CHECKING:
    from servesim.mechanics.speculative import Speculation

    from servesim_trtllm.interfaces import CoreView
    from servesim_trtllm.request import TrtRequest


def priced(ready: list[TrtRequest]) -> tuple[int, int]:
    """``(requests, summed lengths)`` the verification forward prices."""
    n = kv = 0
    for r in ready:
        if r.max_output > r.generated:
            n += 1
            kv += r.prompt_len + r.generated
    return n, kv


def emit(core: CoreView, spec: Speculation, ready: list[TrtRequest],
         out: OutputBatch) -> list[RequestId]:
    """Emit each ready request's burst (see the module docstring); the finished ids."""
    bs = core.bs
    sampling = [r for r in ready if r.max_output > r.generated]
    need = 0
    for r in sampling:
        length = r.prompt_len + r.generated
        burst = spec.largest_burst(r.max_output - r.generated)
        need += -(-(length + burst) // bs) - len(r.table.ids)
    if need > core.pool.num_free + core.pool.num_inactive:
        sampling = []  # no room for the bursts, and this policy never preempts
    bursts = {r.rid: spec.draw_burst(r.max_output - r.generated) for r in sampling}
    finished: list[RequestId] = []
    for r in ready:
        if not r.first_output_sent and (r.rid in bursts or r.max_output <= r.generated):
            r.first_output_sent = True
            out.cached_tokens[r.rid] = r.first_cached or 0
        burst = bursts.get(r.rid, 0)
        if burst:
            out.token_request_ids.extend([r.rid] * burst)
            r.generated += burst
        if r.generated >= r.max_output:
            core.finish(r, out)
            finished.append(r.rid)
        elif burst:
            _keep_dangling(core, r)
    return finished


def _keep_dangling(core: CoreView, r: TrtRequest) -> None:
    bs = core.bs
    length = r.prompt_len + r.generated
    held = len(r.table.ids)
    if not core.pool.allocate(r.table, -(-length // bs)):
        raise RuntimeError(f"trtllm rank: no block for request {r.rid}'s reserved burst")
    core.reserved -= len(r.table.ids) - held
    r.num_computed = length - 1
    full = r.num_computed // bs
    if core.pool.prefix_caching and full > r.table.num_cached:
        core.finalize_through(r, full)


__all__ = ["emit", "priced"]
