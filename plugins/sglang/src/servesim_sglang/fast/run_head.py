"""The FCFS queue head of a run held back at every pass (servesim_sglang.fast.runs).

A run may start while requests wait only when stepping's ``_admit`` would admit nothing in
any of its passes: no free slot, or the head's fixed ask exceeding ``rem_total`` at each pass
(the run checks the latter pass by pass with :class:`Head`).
"""

from __future__ import annotations

from typing import Any


class Head:
    """The FCFS head's admission attempt at every pass of a run: no slot (``slots``), or the
    fixed ``charged + reserve`` it would ask of ``rem_total`` (``ask``; None when a fixed
    budget already stops it)."""

    __slots__ = ("ask", "reserved", "fixed_tree")

    def __init__(self, ask: int | None, reserved: int, fixed_tree: bool = True) -> None:
        self.ask = ask
        self.reserved = reserved  # Σ min(remaining output, clip) over the running batch
        self.fixed_tree = fixed_tree  # an eviction could change the head's match: stop


def held_head(s: Any) -> Head | None:
    """How ``_admit`` treats the waiting queue's head during a run, or None when that could
    change within it. With no slot (``max_running_requests``) nothing is tried. Otherwise
    the head's chunk is sized as ``_admit_one`` does; its radix match is fixed during a run
    without evictions unless it ends at a leaf that a running request extends (declined),
    and the running batch's reservation falls by one token per request per pass while no
    remaining output exceeds ``clip_max_new_tokens`` (else declined)."""
    running = s.running
    if len(running) >= s.p.max_running_requests:
        return Head(None, 0, fixed_tree=False)
    p, cache = s.p, s.cache
    ps = cache.page_size
    req = s.waiting[0]
    clip = p.clip_max_new_tokens
    reserved = 0
    for r in running:
        if r.remaining_output > clip:
            return None
        reserved += r.remaining_output
    seq_len = len(req.tokens)
    # Cheap bound first (most heads are simply admitted): the head asks at most its whole
    # page-rounded sequence plus its clipped output of ``rem_total``.
    ask_max = -(-seq_len // ps) * ps + min(req.remaining_output, clip)
    if ask_max < float(cache.available_tokens + cache.evictable_size) - reserved * s.ratio:
        return None
    first = req.materialized == 0
    if first:
        limit = seq_len if req.max_out == 0 else seq_len - 1
        start = cache.match_len(req.tokens, limit)
        if match_may_grow(cache, req.tokens, limit):
            return None
    else:
        start = req.materialized
    extend = seq_len - start
    rem_chunk = float(p.chunked_prefill_size) if p.chunking else float("inf")
    if extend == 0 and not first:
        return Head(None, reserved)
    if extend <= rem_chunk:
        chunk = extend
    else:
        chunk = min(int(rem_chunk) // ps * ps, extend)
        if chunk == 0:
            return Head(None, reserved)
    charged = -(-chunk // ps) * ps
    reserve = 0 if chunk < extend else min(req.remaining_output, clip)
    if charged > float(p.max_prefill_tokens) or charged > rem_chunk:
        return Head(None, reserved)
    return Head(charged + reserve, reserved)


def match_may_grow(cache: Any, tokens: list[int], limit: int) -> bool:
    """Whether ``match_len(tokens, limit)`` ends by consuming a whole leaf that some request
    locks (a running request extends it in place, so the match could grow)."""
    if not cache.caching:
        return False
    ps = cache.page_size
    end = limit - limit % ps
    cur, off = cache.root, 0
    while off < end:
        child = cur.children.get(cache.child_key(tokens, off))
        if child is None:
            break
        common = cache.common_len(child.key, tokens, off, end)
        off += common
        if common < len(child.key):
            return False
        cur = child
    return off < end and cur is not cache.root and not cur.children and cur.lock > 0


__all__ = ["Head", "held_head", "match_may_grow"]
