"""Runs of passes: a rank may commit k consecutive decode passes in one call (DESIGN.md §7).

Between external events nothing can change a steady decode-only batch except what the rank
itself foresees (a request reaching its output length, a block boundary needing a block,
memory running out). :meth:`servesim.rank.Rank.execute_run` lets a rank commit such a *run*:

* pass 0 starts at ``now``; pass ``j + 1`` starts at pass ``j``'s end;
* every pass starts strictly before ``horizon_ms`` — the driver's next external event that
  could reach the engine (a driver delivers events due at or before a pass's start before
  starting it, so an event at the horizon lands inside the run's last pass, or right after it
  when it coincides with its end, exactly as when stepping);
* the run stops at the first pass whose batch would differ from the steady batch (possible
  admission, prefill chunk, preemption, an allocation that could fail); a pass that completes
  requests may be the run's *last* pass. When the driver allows it (``through_completions``:
  a completion can release no work, e.g. no next session turn) and nothing waits, a run may
  also continue through completions: a request completed at pass ``j < k - 1`` simply stops
  emitting, and its completion is known when the run starts (``RankRun.completed_at``), so a
  driver can deliver it at its own boundary before any later event.

:class:`RunEffects` carry the k passes' effects compactly; :func:`expand` turns them into the k
:class:`servesim.contract.PassCompletionEffects` the stepping path would have produced, which
is how tests prove the two paths identical. A rank that does not support runs inherits the
default ``execute_run`` returning None, and drivers fall back to stepping.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from attrs import define, field, frozen

from servesim.contract import (
    ForwardPassMetrics,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    RequestId,
)


@frozen(slots=True)
class RankRun:
    """What a rank returns when it commits a run; ``pending`` goes back to ``complete_run``.

    ``pass_ends[j]`` is pass ``j``'s modelled end; pass 0 started at ``started_at_ms``.
    """

    started_at_ms: float
    pass_ends: tuple[float, ...]
    pending: Any
    # (pass index j < k - 1, request id) of requests completed before the run's last pass, in
    # stepping's order (pass, then batch order). Commands during the run cannot change them.
    completed_at: tuple[tuple[int, RequestId], ...] = ()
    # The requests emitting a token at every pass (until their completion), in batch order;
    # () when the rank does not say (drivers that need them then see no run tokens early).
    members: tuple[RequestId, ...] = ()

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def end_ms(self) -> float:
        return self.pass_ends[-1]


@define(slots=True)
class RunEffects:
    """The completion effects of a run of ``k = len(pass_ends)`` passes.

    * ``members``: requests that emitted one token at every pass, in batch order;
    * ``absent_last``: members that emitted no token at the last pass (a command issued while
      the last pass was in flight suppressed it), in batch order;
    * ``completed``: requests completed at the last pass (their last token is in it);
    * ``completed_before``: pass index ``j < k - 1`` -> members completed at pass ``j`` (their
      last token is at pass ``j``; they emit nothing later), in batch order;
    * ``kv_events``: pass index -> the KV events released at that pass's end;
    * ``forward_pass_metrics``: one per pass when the rank captures them, else None;
    * ``pass_metrics``: the occupancy snapshot each pass's completion would report
      (``pass_metrics[-1]`` is the final one);
    * ``lifecycle_events``: handoff lifecycle events of the last pass's boundary
      (``HandoffBook.at_run_end``).
    """

    started_at_ms: float
    pass_ends: list[float]
    members: list[RequestId]
    absent_last: list[RequestId] = field(factory=list)
    completed: list[RequestId] = field(factory=list)
    kv_events: dict[int, list[KvEvent]] = field(factory=dict)
    forward_pass_metrics: Sequence[ForwardPassMetrics] | None = None  # servesim.fpm_runs.FpmRun from vLLM
    completed_before: dict[int, list[RequestId]] = field(factory=dict)
    # Built on first use: drivers rarely read per-pass occupancy.
    pass_metrics_factory: Callable[[], list[Metrics]] | None = None
    _pass_metrics: list[Metrics] | None = field(default=None, init=False)
    lifecycle_events: list[Any] = field(factory=list)

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def pass_metrics(self) -> list[Metrics] | None:
        if self._pass_metrics is None and self.pass_metrics_factory is not None:
            self._pass_metrics = self.pass_metrics_factory()
        return self._pass_metrics

    @property
    def metrics(self) -> Metrics | None:
        pm = self.pass_metrics
        return pm[-1] if pm else None


def expand(run: RunEffects) -> list[PassCompletionEffects]:
    """The per-pass effects the stepping path would have released for this run."""
    k = run.num_passes
    absent = set(run.absent_last)
    gone: set[RequestId] = set()
    out = []
    for j in range(k):
        last = j == k - 1
        tokens = [r for r in run.members if r not in gone] if gone else list(run.members)
        if last and absent:
            tokens = [r for r in tokens if r not in absent]
        done = list(run.completed) if last else list(run.completed_before.get(j, ()))
        gone.update(done)
        batch = OutputBatch(token_request_ids=tokens, completed=done)
        eff = PassCompletionEffects(outputs=batch, kv_events=list(run.kv_events.get(j, ())))
        if last and run.lifecycle_events:
            eff.lifecycle_events = list(run.lifecycle_events)
        pm = run.pass_metrics
        if pm is not None:
            eff.metrics = pm[j]
        if run.forward_pass_metrics is not None:
            eff.forward_pass_metrics = run.forward_pass_metrics[j]
        out.append(eff)
    return out


@frozen(slots=True)
class EngineRunStarted:
    """A run committed by an engine: pass ids ``first_pass_id .. first_pass_id + k - 1``."""

    first_pass_id: int
    started_at_ms: float
    pass_ends: tuple[float, ...]
    completed_at: tuple[tuple[int, RequestId], ...] = ()  # as RankRun.completed_at
    members: tuple[RequestId, ...] = ()  # as RankRun.members

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def end_ms(self) -> float:
        return self.pass_ends[-1]


@frozen(slots=True)
class EngineRunCompleted:
    """A released run (dp_size 1: the single rank's effects)."""

    first_pass_id: int
    effects: RunEffects


def check_run(run: RankRun, now_ms: float, horizon_ms: float, max_passes: int) -> None:
    """Raise ValueError when a rank's run visibly breaks the contract above. O(1): the
    first and last passes are checked (starts, horizon, finite end); the rank owns the
    monotonicity of the boundaries in between (its tests compare runs with stepping)."""
    ends = run.pass_ends
    k = len(ends)
    if not 1 <= k <= max_passes:
        raise ValueError(f"a run must have 1..{max_passes} passes, got {k}")
    if run.started_at_ms != now_ms or not now_ms < horizon_ms:
        raise ValueError(f"run starts at {run.started_at_ms} (now {now_ms}, horizon {horizon_ms})")
    last_start = ends[-2] if k > 1 else now_ms
    if not last_start < horizon_ms:
        raise ValueError(f"a run pass starts at {last_start} >= horizon {horizon_ms}")
    if not (ends[0] >= now_ms and ends[-1] >= last_start) or ends[-1] == float("inf"):
        raise ValueError(f"run boundaries {ends[0]}..{ends[-1]} are not after their starts")


def pass_gaps(ends: Sequence[float]) -> list[float]:
    """``ends[j] - ends[j-1]`` for j >= 1: the inter-token gap every member saw at pass j."""
    return [ends[j] - ends[j - 1] for j in range(1, len(ends))]



class RunPending:
    """What every backend keeps of a committed run between ``execute_run`` and
    ``complete_run``. ``effects`` is the *last* pass's retained completion effects, so a
    command applied mid-pass suppresses outputs exactly as with a stepped pending pass."""

    __slots__ = ("started_at_ms", "ends", "members", "effects", "kv_events",
                 "completed_before", "queued")

    def __init__(self, started_at_ms: float) -> None:
        self.started_at_ms = started_at_ms
        self.ends: list[float] = []
        self.members: list[int] = []
        self.effects = PassCompletionEffects()
        self.kv_events: dict[int, list[KvEvent]] = {}
        self.completed_before: dict[int, list[int]] = {}  # pass j < k-1 -> completed there
        self.queued = 0  # waiting requests during the run (held back: none is admitted)

    def take_events(self, source: Any, j: int) -> None:
        """File the events ``source`` (a pool or cache) published since its last drain
        under pass ``j``."""
        evs = source.drain_events()
        if evs:
            self.kv_events.setdefault(j, []).extend(evs)


class BlockRunPending(RunPending):
    """A committed run of a block-pool backend (vllm, trtllm)."""

    __slots__ = ("occupancy", "segments", "counter0", "fpm_fields", "last_emitters",
                 "departures")

    def __init__(self, started_at_ms: float) -> None:
        super().__init__(started_at_ms)
        # (pass, active blocks, inactive blocks) after each pass that changed the pool; the
        # first entry (pass -1) is the state before the run. Per-pass Metrics derive from it.
        self.occupancy: list[tuple[int, int, int]] = []
        # (first pass, summed pre-run lengths, their squares, batch size) of each stretch of
        # passes between completions (FPMs derive from them).
        self.segments: list[tuple[int, int, int, int]] = []
        self.last_emitters: list[int] = []  # members emitting at the last pass
        self.departures: list[tuple[int, int]] = []  # (pass, requests completed there)
        self.counter0 = 0
        self.fpm_fields: dict[str, Any] | None = None

    def set_members(self, members: list[int], completed: list[int],
                    completed_at: list[tuple[int, int]]) -> None:
        """The run's members and its last pass's outputs: every member emits at every pass,
        except that those in ``completed_at`` (``(pass j < k - 1, id)``, in stepping's order)
        stop after their pass; ``completed`` finished with the last pass."""
        emitters = members
        if completed_at:
            emitters = members[:]
            for _j, rid in completed_at:
                emitters.remove(rid)
            before = self.completed_before
            for j, rid in completed_at:
                before.setdefault(j, []).append(rid)
            self.departures = [(j, len(rids)) for j, rids in sorted(before.items())]
        self.members = members
        self.last_emitters = emitters
        self.effects.outputs = OutputBatch(token_request_ids=list(emitters), completed=completed)

    def metrics_factory(self, final: Metrics | None) -> Callable[[], list[Metrics]] | None:
        """``RunEffects.pass_metrics_factory`` for this run, given the snapshot the rank takes
        when the run completes (None when the rank records no metrics: nor does the run)."""
        if final is None:
            return None
        return lambda: self._pass_metrics(final)

    def _pass_metrics(self, final: Metrics) -> list[Metrics]:
        """Each pass's occupancy snapshot: intermediate passes see the pool after their own
        block steps and the batch less the run's completions so far (no command ran, so the
        queue is as it was); the last pass reports ``final``."""
        occupancy, departures = self.occupancy, self.departures
        out = []
        at = dep = 0
        left = len(self.members)
        for j in range(len(self.ends) - 1):
            while at + 1 < len(occupancy) and occupancy[at + 1][0] <= j:
                at += 1
            while dep < len(departures) and departures[dep][0] <= j:
                left -= departures[dep][1]
                dep += 1
            _, a, i = occupancy[at]
            out.append(Metrics(dp_rank=final.dp_rank, active_blocks=a, inactive_blocks=i,
                               total_blocks=final.total_blocks, running_requests=left,
                               waiting_requests=self.queued,
                               preemptions_total=final.preemptions_total))
        out.append(final)
        return out


def take_run_kv_events(
    kv_events: dict[int, list[KvEvent]], before_pass: int
) -> dict[int, list[KvEvent]]:
    """Remove and return the per-pass KV events of passes ``< before_pass``."""
    out = {j: evs for j, evs in kv_events.items() if j < before_pass}
    for j in out:
        del kv_events[j]
    return out


# Passes priced one by one in price_decode_chunks while numpy is not imported, before it is:
# importing numpy costs about as much CPU as pricing this many passes by hand (about 70 ms),
# and a short replay never needs it. Only the speed depends on the path, never the ends.
_BY_HAND_BUDGET = 1 << 15
_by_hand = [0]


def price_decode_chunks(
    timing: Any, m: int, total: int, capacity: int, dsp: float,
    j: int, kmax: int, start: float, horizon: float, ends: list[float],
) -> bool:
    """Append the ends of steady decode passes ``j .. kmax-1`` priced in numpy chunks
    (pass ``j`` starts at ``start``; pass i prices ``m`` decoders of summed length
    ``total + i*m`` against ``capacity`` KV tokens). Uses the same IEEE operations as the
    scalar path (``predict_decode_ms_many``, ``scaled_ms_many``, a left-to-right ``cumsum``),
    so the ends are bit-identical to stepping. True when it stopped early (a pass reaching
    ``horizon`` or of zero duration, which is kept). Until numpy is imported, the first
    ``_BY_HAND_BUDGET`` such passes of the process are priced one by one instead
    (:func:`_price_by_hand`, the same ends)."""
    if j >= kmax:
        return False
    if "numpy" not in sys.modules and _by_hand[0] < _BY_HAND_BUDGET:
        _by_hand[0] += kmax - j
        return _price_by_hand(timing, m, total, capacity, dsp, j, kmax, start, horizon, ends)
    import numpy as np

    from servesim.timing.base import scaled_ms_many

    chunk = 32
    while j < kmax:
        n = min(chunk, kmax - j)
        kv_arr = total + np.arange(j, j + n, dtype=np.int64) * m
        d = scaled_ms_many(timing.predict_decode_ms_many(m, kv_arr, capacity), dsp)
        part = np.cumsum(np.concatenate(((start,), d)))[1:]
        stop = np.flatnonzero((part >= horizon) | (d == 0.0))
        if stop.size:
            ends.extend(part[: int(stop[0]) + 1].tolist())
            return True
        ends.extend(part.tolist())
        j += n
        start = ends[-1]
        chunk *= 2
    return False


def _price_by_hand(
    timing: Any, m: int, total: int, capacity: int, dsp: float,
    j: int, kmax: int, start: float, horizon: float, ends: list[float],
) -> bool:
    """:func:`price_decode_chunks` one pass at a time: ``predict_decode_ms`` (which
    ``predict_decode_ms_many`` must equal element for element), :func:`scaled_ms` and a
    running sum, the same float operations in the same order."""
    from servesim.timing.base import scaled_ms

    predict = timing.predict_decode_ms
    while j < kmax:
        kv = total + j * m
        d = scaled_ms(predict(m, kv, kv // m, capacity), dsp)
        start = start + d
        ends.append(start)
        j += 1
        if start >= horizon or d == 0.0:
            return True
    return False

__all__ = [
    "price_decode_chunks",
    "BlockRunPending",
    "take_run_kv_events",
    "EngineRunCompleted",
    "EngineRunStarted",
    "RankRun",
    "RunEffects",
    "check_run",
    "expand",
    "pass_gaps",
]
