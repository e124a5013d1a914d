"""Speculative decoding on the ``sglang`` rank (dynamo-mocker.md §8.1).

As the reference's SGLang decode step: every running request may emit a burst of up to
``min(aic_nextn + 1, remaining)`` tokens (1 on a prefill worker), so the memory check
retracts until every survivor's largest burst fits and evicts cached pages for it
(``SglangScheduler.growth_pages`` counts the burst); the step is priced as one decode
forward, as a plain decode step; each request then draws its burst and emits it, every
token with the step's end time. The first token after a prefill comes out of the prefill
forward, one token without drafts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim_sglang.interfaces import SchedulerView
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.request import SglangRequest


def emit_bursts(s: SchedulerView, running: list[SglangRequest],
                out: PassOutcome) -> list[SglangRequest]:
    """Each running request's burst (pages already reserved); the requests still running."""
    spec = s.spec
    assert spec is not None
    cache = s.cache
    ps = cache.page_size
    keep = []
    for r in running:
        n = spec.draw_burst(r.remaining_output)
        lease = r.lease
        assert lease is not None
        for _ in range(n):
            if len(r.tokens) + 1 > lease.pages * ps:
                cache.free_pages -= 1
                lease.pages += 1
            s.emit(r, out)
            r.materialized += 1
        out.scheduled[r.rid] = n
        if r.remaining_output == 0:
            s.complete(r, out)
        else:
            cache.cache_prefix(lease, r.tokens, r.materialized)
            keep.append(r)
    return keep


__all__ = ["emit_bursts"]
