"""SGLang 0.5.23's overlap loop (``engine.sglang.overlap_schedule``).

``Scheduler.event_loop_overlap`` (``managers/scheduler.py``), SGLang's default unless
``--disable-overlap-schedule``: each iteration schedules and launches batch N, then processes
batch N−1's result (``process_batch_result``), so the scheduler sees a batch's outcome one
step late. What that changes, for an aggregated worker without speculative decoding:

* **A result is processed at the end of the next pass.** The first token of a prefill, the
  prefill's tree insert (``checkpoint_kv_cache``, up to the chunk's end), a decoded token, a
  finish and the KV it frees (``release_kv_cache``) all land after the next pass was
  scheduled, in batch order; the pass log's ``finished`` lists them there. The client still
  gets each token (and a completion) when its own pass ends: SGLang streams a result as soon
  as its forward is done, while the next one runs.
* **Tokens in flight do not count yet.** Admission reserves ``max_new − len(output_ids)`` per
  running request (one more while a token is in flight), and retraction orders by the
  processed outputs.
* **A decode step leaves out the requests whose token in flight is their last**
  (``_reqs_finishing_inflight``, ``next_output_finishes_by_length``): they leave the running
  batch and finish when the result is processed at the end of the step. If the others'
  next tokens do not fit, the step decodes nothing rather than retract
  (``update_running_batch``: the finishing requests' KV comes back at its end); an emptied
  or skipped decode does not decay ``new_token_ratio``.
* A request whose first token is its last joins the running batch until its result is
  processed; when everything left is a pending finish, one more (empty) pass processes it.

Not modelled: a retracted request's token in flight, which SGLang drops (it is generated
again after the re-prefill), stays emitted here (servesim's client already has it); and with
``ignore_eos`` off SGLang cannot know that a request's next token ends it, which servesim's
requests (known output lengths) always do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim_sglang import retraction as _retraction

if TYPE_CHECKING:
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.request import SglangRequest


def defer(s: SchedulerView, r: SglangRequest, out: PassOutcome, prefill: bool) -> None:
    """The token ``r`` was just given is in flight: its result is processed at the end of
    the next pass. A last token completes the request for the client now."""
    r.inflight += 1
    last = r.remaining_output == 0
    # the chunk end for a prefill's tree insert; -1 marks a last token
    s.results.append((r, -1 if last else r.materialized, prefill))
    if last:
        s.report_done(r, out)


def finishing(r: SglangRequest) -> bool:
    """Whether ``r``'s token in flight is its last (``_reqs_finishing_inflight``)."""
    return r.inflight > 0 and r.remaining_output == 0


def hold_back_decode(s: SchedulerView, out: PassOutcome) -> bool:
    """``update_running_batch`` under the overlap loop: drop the requests finishing in
    flight from the running batch; True when the step then decodes nothing (nothing left,
    or the rest do not fit while finishing requests will free KV at the step's end)."""
    gone = [r for r in s.running if finishing(r)]
    if not gone:
        return False
    s.running = rest = [r for r in s.running if not finishing(r)]
    if not rest:
        out.running_batch = 0
        return True
    if _decode_fits(s, rest):
        return False
    out.running_batch = len(rest)
    return True


def _decode_fits(s: SchedulerView, running: list[SglangRequest]) -> bool:
    """``check_decode_mem`` (which evicts on the way, as SGLang's allocator does)."""
    if s.p.behaviour.sglang_retraction:
        return _retraction.fits(s, running)
    cache = s.cache
    return cache.available_tokens + cache.evictable_size >= s.growth_pages(running) * cache.page_size


def process_results(s: SchedulerView, out: PassOutcome) -> None:
    """Process the previous pass's results (``process_batch_result``), in batch order; this
    pass's become the next pass's to process."""
    pending = s.pending_results
    s.pending_results, s.results = s.results, []
    if not pending:
        return
    cache = s.cache
    done: set[int] = set()
    for r, upto, prefill in pending:
        if r.lease is None:  # retracted or cancelled since: SGLang skips the result
            continue
        r.inflight -= 1
        if upto < 0:  # its last token: the request finishes
            s.release_done(r, out)
            done.add(id(r))
        elif prefill or s.cache_decode:
            cache.cache_prefix(r.lease, r.tokens, upto)
            if prefill:
                s.split_prompt(r, upto)
    if done:
        s.running = [r for r in s.running if id(r) not in done]
