"""A steady decode batch held lazily, for ranks with runs of passes (docs/architecture.md, "Speed by design").

After a run of steady decode passes (servesim.fast.runs) every running request of a block-pool rank
is a plain decoder: it computes one token per pass and samples one. While that holds, a
:class:`SteadyBatch` describes the batch by a pass counter ``P`` that only it advances, and per
member three constants kept on the request itself (slots ``sb``, ``se``, ``sn``):

* ``sb``: its sequence length minus ``P`` (its length before pass ``P`` is ``sb + P``);
* ``se``: the value of ``P`` after its last pass (it emits in passes ``P .. se - 1``);
* ``sn``: its serial, increasing in batch order.

What changes from pass to pass is then found without visiting every member:

* the members with a *block step* in pass ``P`` (a block to allocate or to finalise) are
  the serials filed under ``P`` (``steps``; at most one pending step per member), sorted into
  batch order when taken, and the passes that have any are a heap of plain pass numbers
  (``step_passes``): one heap step per pass with steps rather than per member, on small
  ints (the batch maps serials to members); the rank says when a member's next step falls
  (:meth:`first_step`, :meth:`next_step`), or, for a batch built with ``edge_steps``, the
  batch works it out itself (:func:`edge_step_after`);
* the members whose last pass is ``P`` are ``ends[P + 1]``, in batch order;
* the summed lengths and squared lengths come from the sums of ``sb`` and ``sb**2``.

While a batch is set, the members' own counters are stale; the rank writes them back
(:meth:`write_back`) before anything but its runs and steady passes reads them.
:func:`replay_steps` walks a run's block steps and completions in stepping's order, and
:meth:`SteadyBatch.segments` yields the stretches between completions for pricing.
Backends subclass :class:`SteadyBatch` with their requests' fields and block geometry
(``servesim_vllm.fast.steady``, ``servesim_trtllm.fast.steady``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

from servesim._compiled import mypyc_attr


def edge_first_step(length: int, bs: int) -> int:
    """Passes until the next block step of a member of length ``length`` whose steps fall at
    block edges: the pass that fills a block (``L % bs == 0`` before it) and the pass that
    needs the next one (``L % bs == 1``), for one token a pass."""
    rem = length % bs
    return 0 if rem <= 1 else bs - rem


def edge_step_after(b: int, P: int, bs: int) -> int:
    """After a block step in pass ``P`` of a member with ``sb`` ``b`` whose steps fall at
    block edges (:func:`edge_first_step`): the pass of its next one."""
    return P + 1 if bs == 1 or (b + P) % bs == 0 else P + bs - 1


@mypyc_attr(allow_interpreted_subclasses=True)
class SteadyBatch:
    """A steady batch (see the module docstring). Subclasses define :meth:`length`,
    :meth:`left`, :meth:`first_step` and :meth:`next_step` (neither called when the batch
    is built with ``edge_steps``) and :meth:`write`."""

    __slots__ = ("P", "bs", "m", "sum_b", "sum_b2", "steps", "step_passes", "ends", "end_heap",
                 "rids", "serial", "members", "edge_steps")

    def __init__(self, bs: int, edge_steps: bool = False) -> None:
        self.P = 0
        self.bs = bs
        # Block steps at block edges (edge_first_step, edge_step_after), worked out here:
        # :meth:`first_step` and :meth:`next_step` are then never called (the compiled
        # build's call to a backend's method is a Python-level call, and next_step's the
        # most frequent one of a steady pass).
        self.edge_steps = edge_steps
        self.m = 0
        self.sum_b = 0
        self.sum_b2 = 0
        self.steps: dict[int, list[int]] = {}  # pass -> serials with a block step then
        self.step_passes: list[int] = []  # heap of the passes in steps
        self.ends: dict[int, list[Any]] = {}
        self.end_heap: list[int] = []
        self.rids: list[int] = []
        self.serial = 0
        self.members: dict[int, Any] = {}  # serial -> member

    # -- backend hooks ----------------------------------------------------------------------

    def length(self, r: Any) -> int:
        """``r``'s sequence length now, from its own counters."""
        raise NotImplementedError

    def left(self, r: Any) -> int:
        """Tokens ``r`` has left to emit, from its own counters (>= 1)."""
        raise NotImplementedError

    def first_step(self, r: Any, length: int) -> int:
        """Passes from now until ``r``'s next block step (0: this pass)."""
        raise NotImplementedError

    def next_step(self, r: Any, P: int) -> int:
        """After ``r``'s block step in pass ``P``: the pass of its next one."""
        raise NotImplementedError

    def write(self, r: Any, length: int, left: int) -> None:
        """Set ``r``'s own counters for sequence length ``length`` with ``left`` to emit."""
        raise NotImplementedError

    # -- membership -------------------------------------------------------------------------

    def add(self, reqs: list[Any]) -> None:
        """Members joining at the end of the batch, their own counters current at ``P``."""
        P = self.P
        ends = self.ends
        serial = self.serial
        members = self.members
        edges, bs = self.edge_steps, self.bs
        sum_b = sum_b2 = 0
        for r in reqs:
            length = self.length(r)
            b = length - P
            end = P + self.left(r)
            r.sb = b
            r.se = end
            r.sn = serial
            members[serial] = r
            sum_b += b
            sum_b2 += b * b
            first = P + (edge_first_step(length, bs) if edges else self.first_step(r, length))
            if first < end:
                _file_step(self, first, serial)
            serial += 1
            bucket = ends.get(end)
            if bucket is None:
                ends[end] = [r]
                heapq.heappush(self.end_heap, end)
            else:
                bucket.append(r)
        self.serial = serial
        self.m += len(reqs)
        self.sum_b += sum_b
        self.sum_b2 += sum_b2
        self.rids = self.rids + [r.rid for r in reqs]  # new list: run effects may hold the old

    def finish(self, end: int) -> list[Any]:
        """Remove the members whose last pass was ``end - 1``; returns them (batch order)."""
        done = self.ends.pop(end)
        heap = self.end_heap
        if heap and heap[0] == end:
            heapq.heappop(heap)
        else:
            heap.remove(end)
            heapq.heapify(heap)
        sum_b = sum_b2 = 0
        members = self.members
        for r in done:
            del members[r.sn]
            b = r.sb
            sum_b += b
            sum_b2 += b * b
        self.m -= len(done)
        self.sum_b -= sum_b
        self.sum_b2 -= sum_b2
        rids = self.rids[:]
        for r in done:
            rids.remove(r.rid)
        self.rids = rids
        return done

    def write_back(self, members: list[Any]) -> None:
        """Set the members' own counters to their values now."""
        P = self.P
        for r in members:
            self.write(r, r.sb + P, r.se - P)

    # -- passes -----------------------------------------------------------------------------

    def sums(self, P: int) -> tuple[int, int]:
        """Summed lengths and squared lengths of the members before pass ``P``."""
        sb = self.sum_b
        return sb + self.m * P, self.sum_b2 + 2 * P * sb + self.m * P * P

    def first_done(self) -> int:
        """Passes until the first member's last pass, plus one (>= 1)."""
        return self.end_heap[0] - self.P

    def pop_steps(self, P: int) -> list[Any]:
        """The members with a block step in pass ``P``, in batch order, off the heap."""
        return _pop_steps(self, P)

    def step_pass(self, P: int, blocked: Callable[[list[Any], int], bool],
                  step: Callable[[list[Any], int], None]) -> bool:
        """Apply the block steps of pass ``P`` (``step(due, P)``, the members in batch
        order) and queue each member's next one; False, changing nothing, when
        ``blocked(due, P)`` says they must be left to stepping (an allocation could fail)."""
        return _step_pass(self, P, blocked, step)

    def segments(self, total: int, sq: int) -> Iterator[tuple[tuple[int, int, int, int], int]]:
        """For a run from ``P`` whose batch has summed lengths ``total`` and squares ``sq``:
        after the first completion, ``((first pass, summed pre-run lengths, squares, batch
        size), end pass)`` of each stretch between completions (a member emits at passes
        ``0 .. se - P - 1``). Lazy, in completion order: a run that stops at the horizon
        touches only the members that completed before it."""
        P0 = self.P
        m = self.m
        ends = self.ends
        keys = sorted(ends)
        last = len(keys) - 1
        for at, end in enumerate(keys):
            done = ends[end]
            for r in done:
                length = r.sb + P0
                total -= length
                sq -= length * length
            m -= len(done)
            if at == last:
                return
            yield (end - P0, total, sq, m), keys[at + 1] - P0


def _step_pass(batch: SteadyBatch, P: int, blocked: Callable[[list[Any], int], bool],
               step: Callable[[list[Any], int], None]) -> bool:
    """:meth:`SteadyBatch.step_pass`, a direct call from this module in the compiled build
    (a method call on a backend's subclass goes through a Python-level lookup)."""
    due = _pop_steps(batch, P)
    if not due:
        return True
    if blocked(due, P):
        # Back under P, in batch order, as they were (nothing else was filed under P since).
        batch.steps[P] = [r.sn for r in due]
        heapq.heappush(batch.step_passes, P)
        return False
    step(due, P)
    edges, bs = batch.edge_steps, batch.bs
    for r in due:
        nxt = edge_step_after(r.sb, P, bs) if edges else batch.next_step(r, P)
        if nxt < r.se:
            _file_step(batch, nxt, r.sn)
    return True


def _file_step(batch: SteadyBatch, P: int, serial: int) -> None:
    """File a member's next block step under pass ``P``."""
    bucket = batch.steps.get(P)
    if bucket is None:
        batch.steps[P] = [serial]
        heapq.heappush(batch.step_passes, P)
    else:
        bucket.append(serial)


def _pop_steps(batch: SteadyBatch, P: int) -> list[Any]:
    heap = batch.step_passes
    if not heap or heap[0] != P:
        return []
    heapq.heappop(heap)
    serials = batch.steps.pop(P)
    if len(serials) > 1:
        serials.sort()  # filed in the order their previous steps came, not batch order
    members = batch.members
    return [members[n] for n in serials]


def plan_passes(
    batch: SteadyBatch,
    now: float,
    max_passes: int,
    through_completions: bool,
    pass_ends: Callable[[float, int, int, int, int, list[float]], bool],
) -> tuple[list[float], list[tuple[int, int, int, int]]]:
    """The ends of a run's passes from ``now`` and its pricing segments ``(first pass,
    summed pre-run lengths, squares, batch size)``. ``pass_ends(start, total, m, j0, j1,
    ends)`` is the backend's pricing: it appends the ends of passes ``j0 .. j1 - 1`` of ``m``
    decoders of summed pre-run length ``total`` (pass ``j0`` starting at ``start``) and says
    whether it stopped early (the horizon, a zero-duration pass). The run stops at the first
    completion unless ``through_completions``; then the batch shrinks at each completion."""
    m = batch.m
    total, sq = batch.sums(batch.P)
    first_done = batch.first_done()
    ends: list[float] = []
    segments = [(0, total, sq, m)]
    stopped = pass_ends(now, total, m, 0, min(first_done, max_passes), ends)
    if not stopped and through_completions and first_done < max_passes:
        # Every member emitted up to the first completion before the horizon: continue
        # without the completed ones (priced per segment between completions).
        for seg, j1 in batch.segments(total, sq):
            segments.append(seg)
            j1 = min(j1, max_passes)
            j0, seg_total, _sq, seg_m = seg
            if j1 <= j0 or pass_ends(ends[-1], seg_total, seg_m, j0, j1, ends):
                break
    return ends, segments


def replay_steps(
    batch: SteadyBatch,
    run: Any,
    pool: Any,
    k: int,
    blocked: Callable[[list[Any], int], bool],
    step: Callable[[list[Any], int], None],
    leave: Callable[[list[Any], int], None],
) -> tuple[int, list[tuple[int, list[Any]]]]:
    """Walk a run of ``k`` passes from ``batch.P`` in stepping's order: each pass's block
    steps (``step(due, P)``, batch order), then its completions (``leave(done, P)``, batch
    order, after they left the batch), filing the KV events ``pool`` published under each
    pass of ``run`` (a ``servesim.fast.runs.BlockRunPending``; and the pool's occupancy after each
    pass that changed it, when ``run.record_occupancy``). ``blocked(due, P)`` says a pass's
    block steps must be left to stepping (an allocation could fail, ...): the run then ends
    before that pass. Returns the passes kept and ``(pass, requests)`` of the completions in
    them. ``batch.P`` is not advanced."""
    events_on = pool.events_enabled
    record = getattr(run, "record_occupancy", True)  # (a run state without it records)
    occupancy = run.occupancy
    if record:
        occupancy.append((-1, pool.num_active, pool.num_inactive))
    # Events left by commands since the last pass belong to pass 0, as when stepping; they
    # are taken once pass 0 is certain to be kept.
    leftover = events_on
    P0 = batch.P
    limit = P0 + k
    step_passes, end_heap = batch.step_passes, batch.end_heap
    finished: list[tuple[int, list[Any]]] = []
    while True:
        pc = step_passes[0] if step_passes else limit
        pe = end_heap[0] - 1 if end_heap else limit  # the last pass of the next completion
        p = pc if pc < pe else pe
        if p >= limit:
            break
        j = p - P0
        if j and leftover:
            run.take_events(pool, 0)
            leftover = False
        if pc == p and not _step_pass(batch, p, blocked, step):
            return j, finished
        if pe == p:
            done = batch.finish(p + 1)
            leave(done, p)
            finished.append((j, done))
        if record:
            occupancy.append((j, pool.num_active, pool.num_inactive))
        if events_on:
            run.take_events(pool, j)
            leftover = False
    if leftover:
        run.take_events(pool, 0)
    return k, finished


__all__ = ["SteadyBatch", "edge_first_step", "edge_step_after", "plan_passes", "replay_steps"]
