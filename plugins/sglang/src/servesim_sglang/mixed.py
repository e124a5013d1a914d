"""SGLang 0.5.23's mixed-style chunked prefill (``engine.sglang.enable_mixed_chunk``).

``--enable-mixed-chunk`` with chunked prefill on (``Scheduler.is_mixed_chunk``,
``managers/scheduler.py``): when a step forms a prefill batch and the running batch is not
empty, the running requests' decodes join that batch (``ForwardMode.MIXED``). What it changes:

* **The prefill budget shrinks by the running batch.** ``get_new_batch_prefill`` hands
  ``PrefillAdder`` ``num_mixed_decode_tokens = len(running_batch.reqs)`` (``schedule_policy.py``):
  it comes off ``rem_input_tokens`` and ``rem_chunk_tokens``, and starts both offsets of the
  memory budget (``PrefillBudget.total_offset`` / ``current_offset``,
  ``mem_cache/prefill_budget.py``). The count is taken before anything is filtered, so under
  the overlap loop it includes the requests finishing in flight.
* **The decodes join after the prefill batch is formed** (the "Mixed-style chunked prefill"
  block): under the overlap loop the requests whose token in flight is their last leave the
  running batch first (``_reqs_finishing_inflight``); then ``check_decode_mem`` (evicting on
  the way) decides: if the rest's next tokens fit, ``prepare_for_decode`` gives them their
  slots and ``ScheduleBatch.mix_with_running`` appends them to the batch, after the prefill
  requests; if not, they sit out the step (no retraction) and decode at the next decode step.
* **The running batch is empty afterwards**: the mixed batch replaces it at the next step
  (``get_next_batch_to_run`` merges the last batch into an empty running batch by taking it),
  so the batch order becomes the prefill requests, then the old running requests.
* A mixed step is a prefill step for ``new_token_ratio`` (no decay, no retraction); a decoded
  request in it finishes as in a decode step, and an unfinished one does not enter the tree
  (``process_batch_result_prefill`` checkpoints prefill requests only).

servesim prices a mixed step as one pass with the prefill chunks and the decode requests.
Off for disaggregated workers (SGLang's prefill and decode servers run their own loops) and
rejected with speculative decoding (SGLang degrades the decodes of a mixed step to plain
one-token decodes there, which is not modelled).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.timing.base import scaled_ms
from servesim.timing.shape import PrefillChunk

from servesim_sglang import overlap as _overlap
from servesim_sglang import retraction as _retraction

if TYPE_CHECKING:
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.request import SglangRequest


def decode_tokens(s: SchedulerView) -> int:
    """``num_mixed_decode_tokens``: what the running batch takes off this step's prefill
    budgets (0 when mixing is off)."""
    return len(s.running) if s.mix else 0


def join(s: SchedulerView, out: PassOutcome) -> tuple[list[SglangRequest] | None, bool]:
    """The mixed block after a prefill batch was formed: ``(the running requests that decode
    in this step, or None when they sit it out; whether a request left the running batch)``.

    With the decodes joined ``s.running`` is emptied (the caller rebuilds it after the
    step); otherwise it keeps what is left after the overlap loop's finishing requests left."""
    left = False
    if s.overlap:
        rest = [r for r in s.running if not _overlap.finishing(r)]
        left = len(rest) < len(s.running)
        s.running = rest
    running = s.running
    if not running or not _fits(s, running):
        out.running_batch = len(running)
        return None, left
    s.running = []
    out.running_batch = 0
    return running, left


def _fits(s: SchedulerView, running: list[SglangRequest]) -> bool:
    """``check_decode_mem`` (evicting as SGLang's allocator does); when the pages fit, the
    eviction of ``prepare_for_decode``'s allocation follows."""
    cache = s.cache
    ps = cache.page_size
    need = s.growth_pages(running) * ps
    if s.p.behaviour.sglang_retraction:
        _retraction.evict_to_free(s, need)
        if cache.available_tokens < need:
            return False
        if s.p.behaviour.conservative_eviction:
            _retraction.evict_to_free(s, len(running) * ps)
        return True
    if cache.available_tokens + cache.evictable_size < need:
        return False
    _retraction.evict_to_free(s, need)
    return True


def price_ms(s: SchedulerView, out: PassOutcome, decodes: list[SglangRequest], prefill_ms: float) -> float:
    """One pass of the prefill chunks and the decode requests: a shape-pricing timing model
    prices it whole; with the two-method models the decode forward is added to the prefill's
    ``prefill_ms`` (as the vllm backend prices its mixed passes)."""
    lens = [len(r.tokens) for r in decodes]
    total_ctx = sum(lens)
    total = s.p.total_tokens
    if s.shapes is not None:
        chunks = [PrefillChunk(tokens, prefix) for _, tokens, prefix, _ in out.prefill_items]
        return s.shapes.price(chunks, lens, min(total_ctx, total), total)
    raw = s.timing.predict_decode_ms(len(lens), min(total_ctx, total), total_ctx // len(lens), total)
    return prefill_ms + scaled_ms(raw, s.speedup * s.decode_speedup)
