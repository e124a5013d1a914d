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

* **A preempted request's token in flight is dropped** (priority scheduling,
  :mod:`servesim_sglang.priority`). ``PrefillAdder.preempt_to_schedule`` runs while the
  previous batch is in flight and releases its victims with ``release_req``, whose
  ``reset_for_retract`` sets ``is_retracted``; when that batch's result is processed,
  ``process_batch_result_prefill`` / ``_decode`` skip retracted requests, so the token is
  never appended to ``output_ids``. The victim re-prefills its prompt and processed outputs
  and samples that token again — even a last token, for a victim whose finish was in flight
  (not yet ``finished()``, so a valid victim). servesim takes the token off the request
  (:func:`drop_inflight`); the client already has it (servesim streams a token when its pass
  ends), so the regenerated token, and a completion it makes, are not sent again
  (:func:`silence`).

Not modelled: a token in flight of a request retracted for decode memory
(``retract_decode``), which SGLang drops the same way, stays emitted here (the oracle's
overlap loop needs ``ignore_eos``, under which no scenario retracted; docs/conformance.md);
and with ``ignore_eos`` off SGLang cannot know that a request's next token ends it, which
servesim's requests (known output lengths) always do.
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


def drop_inflight(s: SchedulerView, r: SglangRequest) -> None:
    """``r``, preempted with a token in flight, loses it: its re-prefill covers the prompt
    and the processed outputs, and samples the token again (not sent again to the client)."""
    if not r.inflight:
        return
    r.tokens.pop()
    r.output_len -= 1
    r.remaining_output += 1
    r.inflight = 0  # the pending result is skipped (the request holds no lease then)
    s.echoes[r.rid] = r


def silence(s: SchedulerView, out: PassOutcome) -> None:
    """Take this pass's regenerated tokens off what the client gets, with the completion a
    last one makes (the client had both when the dropped token's pass ended)."""
    rids = out.token_rids
    echoes = s.echoes
    for i in range(len(rids) - 1, -1, -1):
        r = echoes.pop(rids[i], None)
        if r is None:
            continue
        del rids[i]
        del out.token_ids[i]
        if r.remaining_output == 0:
            out.completed.remove(r.rid)
