"""What a rank keeps of a committed run of passes (:class:`RunPending`), the check of a
rank's run against the contract and the pricing of steady decode passes (servesim.fast.runs,
which re-exports them; docs/architecture.md, "Speed by design").

Plain classes and functions, apart from :mod:`servesim.fast.runs`' attrs classes, so that the
compiled build compiles them; interpreted backends subclass :class:`RunPending`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from servesim._compiled import mypyc_attr
from servesim.contract import KvEvent, Metrics, OutputBatch, PassCompletionEffects


class RunBounds(Protocol):
    """What :func:`check_run` reads of a run (:class:`servesim.fast.runs.RankRun` has it)."""

    @property
    def started_at_ms(self) -> float: ...

    @property
    def pass_ends(self) -> Sequence[float]: ...


def check_run(run: RunBounds, now_ms: float, horizon_ms: float, max_passes: int) -> None:
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


@mypyc_attr(allow_interpreted_subclasses=True)
class RunPending:
    """What every backend keeps of a committed run between ``execute_run`` and
    ``complete_run``. ``effects`` is the *last* pass's retained completion effects, so a
    command applied mid-pass suppresses outputs exactly as with a stepped pending pass."""

    __slots__ = ("started_at_ms", "ends", "members", "effects", "kv_events",
                 "completed_before", "queued", "cached_tokens")

    def __init__(self, started_at_ms: float) -> None:
        self.started_at_ms = started_at_ms
        self.ends: list[float] = []
        self.members: list[int] = []
        self.effects = PassCompletionEffects()
        self.kv_events: dict[int, list[KvEvent]] = {}
        self.completed_before: dict[int, list[int]] = {}  # pass j < k-1 -> completed there
        self.queued = 0  # waiting requests during the run (held back: none is admitted)
        # Cached prompt tokens the first pass reports (of the requests it admitted).
        self.cached_tokens: dict[int, int] = {}

    def take_events(self, source: Any, j: int) -> None:
        """File the events ``source`` (a pool or cache) published since its last drain
        under pass ``j``."""
        evs = source.drain_events()
        if evs:
            self.kv_events.setdefault(j, []).extend(evs)


@mypyc_attr(allow_interpreted_subclasses=True)
class BlockRunPending(RunPending):
    """A committed run of a block-pool backend (vllm, trtllm)."""

    __slots__ = ("occupancy", "segments", "counter0", "fpm_fields", "last_emitters",
                 "departures", "record_occupancy")

    def __init__(self, started_at_ms: float) -> None:
        super().__init__(started_at_ms)
        # (pass, active blocks, inactive blocks) after each pass that changed the pool; the
        # first entry (pass -1) is the state before the run. Per-pass Metrics derive from it.
        self.occupancy: list[tuple[int, int, int]] = []
        # Whether replay_steps records ``occupancy`` (a rank that records no metrics builds
        # no per-pass snapshots from it).
        self.record_occupancy = True
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
    scalar path (:func:`~servesim.fast.decode_many.decode_ms_many`, ``scaled_ms_many``, a
    left-to-right ``cumsum``), so the ends are bit-identical to stepping. True when it
    stopped early (a pass reaching ``horizon`` or of zero duration, which is kept). Until
    numpy is imported, the first ``_BY_HAND_BUDGET`` such passes of the process are priced one
    by one instead (:func:`_price_by_hand`, the same ends)."""
    if j >= kmax:
        return False
    if "numpy" not in sys.modules and _by_hand[0] < _BY_HAND_BUDGET:
        _by_hand[0] += kmax - j
        return _price_by_hand(timing, m, total, capacity, dsp, j, kmax, start, horizon, ends)
    import numpy as np

    from servesim.fast.decode_many import decode_ms_many
    from servesim.timing.base import scaled_ms_many

    chunk = 32
    while j < kmax:
        n = min(chunk, kmax - j)
        kv_arr = total + np.arange(j, j + n, dtype=np.int64) * m
        d = scaled_ms_many(decode_ms_many(timing, m, kv_arr, capacity), dsp)
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
    "BlockRunPending",
    "RunPending",
    "check_run",
    "pass_gaps",
    "price_decode_chunks",
    "take_run_kv_events",
]
