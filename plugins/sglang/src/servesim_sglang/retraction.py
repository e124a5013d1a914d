"""SGLang 0.5.23's decode memory check and retraction (``engine.sglang.sglang_retraction``).

``ScheduleBatch.check_decode_mem`` evicts unlocked cache until the step's new pages fit, or
nothing is left; when they do not, ``retract_decode`` (``schedule_batch.py``) orders the batch
by ``(outputs, −input)`` descending and retracts from the end — fewest outputs first, then the
longest input, then the latest in the batch — at least one request, until the survivors'
pages fit. After each retraction ``release_req`` evicts until ``survivors ×
SGLANG_RETRACT_DECODE_STEPS`` tokens are free. The survivors keep the sorted order as their
batch order (``filter_batch(keep_indices=...)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import PressureEvent, PressureKind, PressureState

if TYPE_CHECKING:
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.request import SglangRequest

RETRACT_DECODE_STEPS = 20
"""SGLang ``SGLANG_RETRACT_DECODE_STEPS``: decode steps of KV kept free per survivor."""


def fits(s: SchedulerView, running: list[SglangRequest]) -> bool:
    need = s.growth_pages(running) * s.cache.page_size
    _evict_to_free(s, need)
    return s.cache.available_tokens >= need


def _evict_to_free(s: SchedulerView, tokens: int) -> None:
    short = tokens - s.cache.available_tokens
    if short > 0:
        s.cache.evict(short)


evict_to_free = _evict_to_free


def check_decode_mem(s: SchedulerView, now: float, out: PassOutcome) -> tuple[list[SglangRequest], int]:
    """Returns the retracted requests and the survivors' page growth for this step."""
    running = s.running
    if fits(s, running) or len(running) <= 1:
        _decode_eviction(s, running)
        return [], s.growth_pages(running)
    # outputs as SGLang's output_ids counts them (a token in flight not yet: the overlap loop)
    order = sorted(range(len(running)),
                   key=lambda i: (running[i].output_len - running[i].inflight, -running[i].prompt_len),
                   reverse=True)
    keep = [running[i] for i in order]
    retracted: list[SglangRequest] = []
    first = True
    while first or not fits(s, keep):
        if len(keep) == 1:
            break
        first = False
        victim = keep[-1]
        logical = s.cache.available_tokens + s.cache.evictable_size
        needed = s.growth_pages(keep) * s.cache.page_size
        retract(s, victim, keep, now, out, logical, needed)
        retracted.append(victim)
        _evict_to_free(s, len(keep) * RETRACT_DECODE_STEPS)
    s.running = keep
    _decode_eviction(s, keep)
    return retracted, s.growth_pages(keep)


def _decode_eviction(s: SchedulerView, running: list[SglangRequest]) -> None:
    """``alloc_paged_token_slots_decode`` evicts for one page per request, needed or not
    (``conservative_eviction``; with page 1 that is the exact need)."""
    if s.p.behaviour.conservative_eviction:
        _evict_to_free(s, len(running) * s.cache.page_size)


def retract(
    s: SchedulerView, victim: SglangRequest, running: list[SglangRequest], now: float,
    out: PassOutcome, logical: int, needed: int,
) -> None:
    """Take ``victim`` out of ``running``: free its private KV (its cached prefix stays,
    unlocked), record the retraction and its pressure event."""
    cache, ps = s.cache, s.p.page_size
    before = PressureState(len(running), None, cache.used_pages)
    victim_blocks = victim.allocated_pages
    running.remove(victim)
    assert victim.lease is not None
    cache.release(victim.lease)
    victim.lease = None
    victim.materialized = 0
    victim.seen_prefix = 0  # reset_for_retract: prefix_len = 0
    victim.inflight = 0  # its token in flight stays emitted (docs/conformance.md)
    s.retractions_total += 1
    s.retracted_ids.add(victim.rid)
    out.retracted.append(victim.rid)
    out.pressure.append(
        PressureEvent(
            at_ms=now,
            kind=PressureKind.SGLANG_RETRACTION,
            request_id=victim.rid,
            state_before=before,
            state_after=PressureState(len(running), None, cache.used_pages),
            request_active_blocks_before=victim_blocks,
            logical_available_blocks_before=logical // ps,
            required_blocks_before=-(-needed // ps),
        )
    )
