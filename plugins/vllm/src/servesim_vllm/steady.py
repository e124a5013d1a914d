"""The steady batch kept between runs and passes, with its members' counters held lazily.

After a run of steady decode passes (servesim_vllm.runs) every running request is a plain
decoder: its prompt is done and one sampled token is left to compute. While that holds,
the batch is fully described by three lists in batch order (known lengths, passes left,
request ids) taken ``k`` passes ago: a member's length now is ``lens[i] + k`` and it
completes after ``rems[i] - k`` more passes (members with ``rems[i] <= k`` have already
completed and are no longer running).

While such a :class:`SteadyCache` is set, the running requests' own ``length``,
``computed`` and ``generated`` are stale: neither a run nor a steady pass writes them, so
neither pays a Python-level step per member. :func:`sync` writes them back, and everything
that reads or changes running requests other than runs and :func:`steady_step` calls it
first (``VllmScheduler.run_pass`` when the pass is not steady, ``cancel``, the handoff
commands).

:func:`steady_step` is the first half of ``VllmScheduler.run_pass`` for such a batch: it
schedules every member as ``_schedule_running`` would (one token each, block steps in batch
order, completions left for ``_emit``), without touching the members. Admission, prefill
pricing and ``_emit`` then run as usual; :func:`after_step` adds the newly admitted requests
to the cache, or syncs when one of them is not a plain decoder yet.
"""

from __future__ import annotations

from operator import mul
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim_vllm.request import VllmRequest
    from servesim_vllm.scheduler import VllmScheduler


class SteadyCache:
    """Lengths, passes left and ids of the running batch ``k`` passes ago (batch order);
    entries with ``rems[i] <= k`` belong to members that completed since."""

    __slots__ = ("running", "k", "lens", "rems", "rids")

    def __init__(self, running: list[VllmRequest], k: int, lens: list[int], rems: list[int],
                 rids: list[int]) -> None:
        self.running = running
        self.k = k
        self.lens = lens
        self.rems = rems
        self.rids = rids

    def current(self) -> tuple[list[int], list[int], list[int]]:
        """``(lens, rems, rids)`` of the members running now, in batch order."""
        k = self.k
        lens, rems, rids = self.lens, self.rems, self.rids
        if not k:
            return lens, rems, rids
        if min(rems) <= k:  # members completed since are gone from the batch
            keep = [r > k for r in rems]
            lens = [x + k for x, live in zip(lens, keep, strict=True) if live]
            rids = [rid for rid, live in zip(rids, keep, strict=True) if live]
            rems = [r - k for r in rems if r > k]
        else:
            lens = [x + k for x in lens]
            rems = [r - k for r in rems]
        return lens, rems, rids


def sync(s: VllmScheduler) -> None:
    """Write the cached counters back into the running requests and drop the cache."""
    cache = s.run_cache
    if cache is None:
        return
    s.run_cache = None
    if cache.running is not s.running:
        raise RuntimeError("vllm rank: the steady batch cache lost track of the running list")
    _write_back(s.running, cache)


def _write_back(members: list[VllmRequest], cache: SteadyCache) -> None:
    lens, rems, _rids = cache.current()
    if len(lens) != len(members):
        raise RuntimeError("vllm rank: the steady batch cache lost track of the running list")
    for req, length, rem in zip(members, lens, rems, strict=True):
        req.length = length
        req.computed = length - 1
        req.generated = req.max_out - rem


def block_step(s: VllmScheduler, req: VllmRequest, length: int) -> None:
    """What ``VllmScheduler._schedule`` does to the pool for a one-token decode step of a
    request whose pre-pass length is ``length`` (its allocation cannot fail here)."""
    bs = s.bs
    table = req.table
    target = -(-length // bs)
    if target > len(table.ids):
        if not s.pool.allocate(table, target, ()):
            raise RuntimeError(f"vllm rank: allocation for request {req.rid} failed despite headroom")
    if s.caching:
        full = length // bs
        if full > table.num_cached:
            seq = req.finalize_seq(full, bs, s.lazy_hashes and req.request.output_token_ids is None)
            tokens = None
            if s.token_ids_in_events:
                tokens = lambda i: req.tokens(i * bs, (i + 1) * bs)  # noqa: E731
            s.pool.finalize(table, full, seq, req.loc, tokens)


def steady_step(s: VllmScheduler) -> bool:
    """Schedule the running batch of this pass from the cache, as ``_schedule_running``
    would; False, having changed nothing, when the pass is not a steady one (handoff state,
    or an allocation that could fail and must preempt)."""
    cache = s.run_cache
    running = s.running
    if cache.running is not running:
        raise RuntimeError("vllm rank: the steady batch cache lost track of the running list")
    book = s.book
    if book is not None and (book.sources or book.dests or book.events or book.blocks_admission):
        return False
    m = len(running)
    if m == 0 or m > s.max_tokens:
        return False
    lens, rems, rids = cache.current()
    bs = s.bs
    pool = s.pool
    due = range(m) if bs == 1 else [i for i, x in enumerate(lens) if x % bs <= 1]
    if due:
        need = 0
        for i in due:
            grow = -(-lens[i] // bs) - len(running[i].table.ids)
            if grow > 0:
                need += grow
        if need > len(pool._free) + len(pool._evict):  # noqa: SLF001 - allocation headroom
            return False
        for i in due:
            block_step(s, running[i], lens[i])
    res = s._res  # noqa: SLF001 - the pass being built
    res.order = running[:]
    res.token_rids = list(rids)
    if min(rems) == 1:  # this pass's token is the last for these (completed in _emit)
        res.later = [running[i] for i, r in enumerate(rems) if r == 1]
    res.plain = [m, sum(lens), sum(map(mul, lens, lens))]
    s._budget = s.max_tokens - m  # noqa: SLF001
    s.run_cache = SteadyCache(running, 1, lens, rems, rids)
    return True


def after_step(s: VllmScheduler, finished_members: int) -> None:
    """After a pass begun by :func:`steady_step`: the running list is its surviving members
    followed by the requests admitted in the pass. Keep the cache when every newcomer is a
    plain decoder now; otherwise sync the members and drop it."""
    cache = s.run_cache
    running = s.running
    survivors = len(cache.rems) - finished_members
    new = running[survivors:]
    cache.running = running
    if not new:
        return
    limit = s.usable_blocks * s.bs
    for req in new:
        if req.computed != req.length - 1 or not req.generated or req.prompt_len + req.max_out > limit:
            # The newcomers' own counters are current: write back the members' and drop it.
            s.run_cache = None
            _write_back(running[:survivors], cache)
            return
    # New lists: a run's effects may still hold the old ones (its members).
    cache.lens = cache.lens + [req.length - 1 for req in new]
    cache.rems = cache.rems + [req.max_out - req.generated + 1 for req in new]
    cache.rids = cache.rids + [req.rid for req in new]


__all__ = ["SteadyCache", "after_step", "block_step", "steady_step", "sync"]
