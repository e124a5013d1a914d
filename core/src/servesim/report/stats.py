"""Per-request records and the statistics the report is built from.

The collector keeps one slot per request in flat lists indexed by request id (request ids are
dense) and pools inter-token gaps in compact ``array('d')`` buffers, so recording a token is a
few list stores, never an object (docs/architecture.md, "Speed by design"). Full per-request token-time lists exist only
when the per-request report is asked for.

Definitions follow dynamo-mocker.md §9.3: percentiles are the element at rank
``round((n-1)*p/100)`` of the sorted values (nearest rank, half away from zero, no
interpolation); ``std`` is the population standard deviation.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from operator import sub
from typing import Any

from servesim.report.pairwise import pairwise_sum
from servesim.report.percentiles import nearest_rank_index, percentile, percentile_key

ARRAY_MIN = 20_000
"""Samples above which the statistics run in numpy (``servesim.report.stats_arrays``), which is
imported only then: both paths give bit-identical results (``tests/replay/test_stats_paths.py``),
and a short replay never imports numpy for its report."""

LIST_MAX = 120_000
"""While numpy is not imported, samples up to this many still take the plain-Python path:
importing numpy costs about as much CPU (about 80 ms) as that path spends on this many samples
more than numpy's does. Only the speed depends on the path, never the figures."""


def in_arrays(samples: int) -> bool:
    """Whether statistics over ``samples`` values run in numpy: above :data:`ARRAY_MIN` once
    numpy is imported, above :data:`LIST_MAX` before."""
    return samples > (ARRAY_MIN if "numpy" in sys.modules else LIST_MAX)


def floats(values: Any) -> list[float]:
    """``values`` (a list, an ``array('d')`` or a numpy array) as a list of Python floats
    (converted in one C-level ``map``: in the compiled build a comprehension's ``float(v)``
    is a generic call per value)."""
    tolist = getattr(values, "tolist", None)
    out = tolist() if tolist is not None else list(values)
    return list(map(float, out))


def distribution(
    name: str, values: Any, percentiles: Iterable[float], unit: str = "_ms",
    presorted: bool = False,
) -> dict[str, float]:
    """``mean_/median_/std_/max_/pNN_<name><unit>``; zeros when there is no sample (vLLM).
    ``presorted``: ``values`` are already in ascending order. The mean and the population
    std are numpy's (``ndarray.mean``/``std`` of the sorted values: pairwise sums,
    :func:`servesim.report.pairwise.pairwise_sum`), bit for bit on either path."""
    if in_arrays(len(values)):
        from servesim.report.stats_arrays import distribution_array

        return distribution_array(name, values, percentiles, unit, presorted)
    vals = floats(values)
    if not presorted:
        vals.sort()
    n = len(vals)
    mean = pairwise_sum(vals) / n if n else 0.0
    out = {
        f"mean_{name}{unit}": mean,
        f"median_{name}{unit}": percentile(vals, 50.0),
        f"std_{name}{unit}": math.sqrt(pairwise_sum([(x - mean) * (x - mean) for x in vals]) / n)
        if n else 0.0,
        f"max_{name}{unit}": vals[-1] if n else 0.0,
    }
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}{unit}"] = percentile(vals, p)
    return out


def weighted_distribution(
    name: str, values: Any, weights: Any, percentiles: Iterable[float], unit: str = "_ms",
) -> dict[str, float]:
    """:func:`distribution` of a multiset given as ``values`` with integer ``weights``
    (copies), without materialising the copies: percentiles by cumulative weight, the mean
    and population std from exact sums (error-free products, ``math.fsum``), so the result
    depends only on the multiset — however it is split into (value, weight) pairs."""
    uniq, counts = weighted_sorted(values, weights)
    return sorted_weighted_distribution(name, uniq, counts, percentiles, unit)


def weighted_sorted(values: Any, weights: Any) -> tuple[list[float], list[int]]:
    """``(distinct values ascending, their total weights)`` of a weighted multiset."""
    totals: dict[float, int] = {}
    # The weights as a list of ints first (one C-level map): the compiled build then reads
    # each unboxed and calls the dict's own get, where a bound ``get`` and ``int(w)`` were
    # two Python-level calls an entry.
    ws: list[int] = list(map(int, weights))
    for v, w in zip(floats(values), ws):
        if w > 0:
            totals[v] = totals.get(v, 0) + w
    uniq = sorted(totals)
    return uniq, [totals[v] for v in uniq]


def sorted_weighted_distribution(
    name: str, uniq: Any, counts: Any, percentiles: Iterable[float], unit: str = "_ms",
) -> dict[str, float]:
    """:func:`weighted_distribution` of values already in non-decreasing order with positive
    integer weights (equal neighbours allowed: every statistic depends only on the multiset).
    ``uniq`` and ``counts`` are lists or numpy arrays."""
    if in_arrays(len(uniq)):
        from servesim.report.stats_arrays import sorted_weighted_distribution_array

        return sorted_weighted_distribution_array(name, uniq, counts, percentiles, unit)
    xs = floats(uniq)
    ws: list[int] = list(map(int, counts))
    n = sum(ws)
    if n == 0:
        return distribution(name, [], percentiles, unit)
    cum = list(accumulate(ws))

    def at(rank: int) -> float:
        return xs[bisect_right(cum, rank)]

    mean = exact_dot(xs, ws) / n
    var = exact_dot([(x - mean) * (x - mean) for x in xs], ws) / n
    out = {
        f"mean_{name}{unit}": mean,
        f"median_{name}{unit}": at(nearest_rank_index(n, 50.0)),
        f"std_{name}{unit}": math.sqrt(var),
        f"max_{name}{unit}": xs[-1],
    }
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}{unit}"] = at(nearest_rank_index(n, p))
    return out


def exact_dot(x: Sequence[float], w: Sequence[int]) -> float:
    """``sum(x * w)`` correctly rounded: Dekker's error-free products, then ``math.fsum``
    (the same float operations as ``stats_arrays``' element-wise version)."""
    split = 134217729.0  # 2**27 + 1 (Veltkamp)
    parts: list[float] = []
    for a, wi in zip(x, w):
        b = float(wi)  # integer weights below 2**53 are exact
        prod = a * b
        ca = split * a
        cb = split * b
        ah = ca - (ca - a)
        al = a - ah
        bh = cb - (cb - b)
        bl = b - bh
        parts.append(prod)
        parts.append(((ah * bh - prod) + ah * bl + al * bh) + al * bl)
    return math.fsum(parts)


def run_token_counts(k: int, absent_last: Sequence[int],
            completed_before: dict[int, list[int]] | None) -> dict[int, int] | None:
    """Tokens of the run members that emitted fewer than ``k`` (None when none did)."""
    if not completed_before and not absent_last:
        return None
    count = {rid: j + 1 for j, rids in (completed_before or {}).items() for rid in rids}
    for rid in absent_last:
        count[rid] = k - 1
    return count


class RequestLog:
    """What every request saw. Times are simulated ms; ``-1.0`` means "not yet"."""

    def __init__(
        self, input_lengths: Sequence[int], *, record_token_times: bool = False
    ) -> None:
        n = len(input_lengths)
        self.n = n
        self.input_length = list(input_lengths)
        self.arrival = [-1.0] * n
        self.first = [-1.0] * n
        self.last = [-1.0] * n
        self.ntok = [0] * n
        self.done = [-1.0] * n
        self.worker = [-1] * n
        self.dp_rank = [-1] * n
        self.cached: list[int | None] = [None] * n
        self.reused = [0] * n
        self.first_reused: list[int | None] = [None] * n
        self.admitted = [-1.0] * n  # first admission (vLLM's "scheduled" time), simulated ms
        self.rejected = [False] * n
        self.itl = array("d")
        self.itl_rid = array("q")
        # Gaps shared by every member of a run of passes (servesim.fast.runs): gap value and how
        # many requests saw it. Only requests that always complete join runs, so these never
        # need the completed-request mask.
        self.shared_gap = array("d")
        self.shared_weight = array("q")
        self.token_times: list[list[float]] | None = (
            [[] for _ in range(n)] if record_token_times else None
        )
        self.num_preemptions = 0
        self.max_in_flight = 0
        # output tokens per whole simulated second (vLLM's max_output_tokens_per_s)
        self.tokens_per_second: dict[int, int] = {}
        # Per-request fields a replay adds (disaggregated replay's handoff times), or None.
        self.extra: dict[str, list[Any]] | None = None
        # Speculative decoding (servesim.mechanics.speculative): drafts per forward (0: none seen),
        # verification forwards, accepted drafts, and accepted drafts per position.
        self.spec_nextn = 0
        self.spec_drafts = 0
        self.spec_accepted = 0
        self.spec_per_pos: list[int] = []
        # First-admission cache-tier attribution (device, host), when a rank reports it.
        self.tier_g1: list[int] | None = None
        self.tier_host: list[int] | None = None

    def append_request(self, input_length: int) -> int:
        """One more request of ``input_length`` prompt tokens, not yet arrived (every
        per-request list above grows by one; ``extra`` belongs to the replay that set it);
        returns its id. For a replay fed requests while it runs (servesim_serve.disagg_live)."""
        rid = self.n
        self.n = rid + 1
        self.input_length.append(input_length)
        for floats in (self.arrival, self.first, self.last, self.done, self.admitted):
            floats.append(-1.0)
        self.ntok.append(0)
        self.worker.append(-1)
        self.dp_rank.append(-1)
        self.cached.append(None)
        self.reused.append(0)
        self.first_reused.append(None)
        self.rejected.append(False)
        if self.token_times is not None:
            self.token_times.append([])
        if self.tier_g1 is not None and self.tier_host is not None:
            self.tier_g1.append(0)
            self.tier_host.append(0)
        return rid

    def tier_attribution(self, rid: int, tier: Any) -> None:
        """A first admission's :class:`servesim.contract.CacheTierAttribution`: prompt
        tokens already in device KV and those restored from the host tier."""
        if self.tier_g1 is None:
            self.tier_g1 = [0] * self.n
            self.tier_host = [0] * self.n
        self.tier_g1[rid] = tier.g1_reused_input_tokens
        self.tier_host[rid] = tier.host_reused_input_tokens  # type: ignore[index]

    def acceptance(self, acc: Any) -> None:
        """Add one pass's :class:`servesim.contract.DecodeAcceptance` with drafts."""
        if len(self.spec_per_pos) < acc.nextn:
            self.spec_per_pos += [0] * (acc.nextn - len(self.spec_per_pos))
            self.spec_nextn = acc.nextn
        self.spec_drafts += acc.forwards
        self.spec_accepted += acc.accepted_tokens - acc.forwards
        per_pos = self.spec_per_pos
        for i, n in enumerate(acc.accepted_per_pos):
            per_pos[i] += n

    # -- recording (hot path) ----------------------------------------------------------

    def tokens(self, rids: Sequence[int], now: float, key: int | None = None) -> list[int]:
        """Record one pass's emitted tokens at ``now``; returns ids that got their first token.

        A request has a first token exactly when its ``last`` time is set (times are >= 0),
        so one read serves both the check and the gap. ``key`` (the worker) serves
        :class:`servesim.fast.cohorts.CohortLog`; this class ignores it."""
        first, last, ntok = self.first, self.last, self.ntok
        itl_append = self.itl.append
        firsts = []
        for rid in rids:
            prev = last[rid]
            if prev < 0.0:
                first[rid] = now
                firsts.append(rid)
            else:
                itl_append(now - prev)
            last[rid] = now
            ntok[rid] += 1
        # The gaps' ids in one call: every id but the first tokens', which usually are the
        # newest requests, at the end of the batch.
        if type(rids) is not list:
            rids = list(rids)
        if not firsts:
            self.itl_rid.fromlist(rids)
        elif rids[-len(firsts):] == firsts:
            self.itl_rid.fromlist(rids[:-len(firsts)])
        else:
            # Only a first token has no gap: later tokens of the same pass (a speculative
            # burst) keep theirs.
            got = set(firsts)
            gaps = []
            for rid in rids:
                if rid in got:
                    got.discard(rid)
                else:
                    gaps.append(rid)
            self.itl_rid.fromlist(gaps)
        second = int(now // 1000.0)
        self.tokens_per_second[second] = self.tokens_per_second.get(second, 0) + len(rids)
        if self.token_times is not None:
            tt = self.token_times
            for rid in rids:
                tt[rid].append(now)
        return firsts

    def run_tokens(self, members: Sequence[int], absent_last: Sequence[int],
                   ends: Sequence[float], start: float | None = None,
                   completed_before: dict[int, list[int]] | None = None,
                   key: int | None = None, completed: Sequence[int] = ()) -> None:
        """Record a run that started at ``start``: every member (already past its first
        token) emitted one token at each of ``ends`` (those in ``absent_last`` none at the
        last). The ``k - 1`` later gaps are shared by all members and stored once with a
        weight; so is the first gap of members whose previous token came at ``start`` (all
        but the newest, usually). A member's first gap ever (its time to second token) stays
        an individual sample, so the report can find it. ``completed_before`` maps a pass
        ``j < k - 1`` to the members whose last token was at pass ``j``. ``key`` (the
        worker) and ``completed`` (the members that finished with the last pass) serve
        :class:`servesim.fast.cohorts.CohortLog`; this class ignores them."""
        k = len(ends)
        count = run_token_counts(k, absent_last, completed_before)
        at_start, fresh = self._first_gaps(members, count, k, ends, start)
        self._shared_gaps(len(members), k, ends, start, at_start, absent_last, completed_before,
                          fresh)

    def _first_gaps(self, members: Sequence[int], count: dict[int, int] | None, k: int,
                    ends: Sequence[float], start: float | None) -> tuple[int, int]:
        """Each member's first gap in a run and its last time and token count (``count``:
        tokens of the members with fewer than ``k``). A member without a token before the
        run (admitted by its first pass, ``RankRun.admissions``) has its first token at pass
        0 and its time to second token, at pass 1, as its individual sample. Returns how many
        first gaps began at ``start`` and are not a first gap ever (they are stored shared)
        and how many members' pass-1 gap is such a time to second token."""
        e0 = ends[0]
        last, ntok = self.last, self.ntok
        itl_append, rid_append = self.itl.append, self.itl_rid.append
        tt = self.token_times
        at_start = fresh = 0
        if count is None:
            # Every member emitted at every pass (the common case).
            end = ends[-1]
            for rid in members:
                prev = last[rid]
                if prev == start and ntok[rid] > 1:
                    at_start += 1
                elif prev < 0.0:
                    self.first[rid] = e0
                    if k > 1:
                        itl_append(ends[1] - e0)
                        rid_append(rid)
                        fresh += 1
                else:
                    itl_append(e0 - prev)
                    rid_append(rid)
                last[rid] = end
                ntok[rid] += k
            if tt is not None:
                for rid in members:
                    tt[rid].extend(ends)
            return at_start, fresh
        get = count.get
        for rid in members:
            n = get(rid, k)
            if n:
                prev = last[rid]
                if prev == start and ntok[rid] > 1:
                    at_start += 1
                elif prev < 0.0:
                    self.first[rid] = e0
                    if n > 1:
                        itl_append(ends[1] - e0)
                        rid_append(rid)
                        fresh += 1
                else:
                    itl_append(e0 - prev)
                    rid_append(rid)
                last[rid] = ends[n - 1]
                ntok[rid] += n
                if tt is not None:
                    tt[rid].extend(ends[:n])
        return at_start, fresh

    def _shared_gaps(self, m: int, k: int, ends: Sequence[float], start: float | None,
                     at_start: int, absent_last: Sequence[int],
                     completed_before: dict[int, list[int]] | None, fresh: int = 0) -> None:
        """The gaps a run's ``m`` members share (the first ones that began at ``start``, and
        every later one, weighted by the members emitting then, less at pass 1 the ``fresh``
        times to second token recorded individually) and the per-second counts."""
        e0 = ends[0]
        if at_start:
            assert start is not None
            self.shared_gap.append(e0 - start)
            self.shared_weight.append(at_start)
        counts = self.tokens_per_second
        if completed_before:
            # Members emitting at each pass: m less those completed at earlier passes (a
            # running sum of the departures, linear in k however many complete).
            drop = [0] * k
            for j, rids in completed_before.items():
                if j + 1 < k:
                    drop[j + 1] += len(rids)
            emitting = [m - d for d in accumulate(drop)]
            emitting[k - 1] -= len(absent_last)
            if k > 1:
                shared_w = emitting[1:]
                if fresh:
                    shared_w[0] -= fresh
                gaps = list(map(sub, ends[1:], ends[:-1]))  # ends[j] - ends[j - 1]
                if 0 in shared_w:
                    kept = [i for i, w in enumerate(shared_w) if w]
                    gaps = [gaps[i] for i in kept]
                    shared_w = [shared_w[i] for i in kept]
                self.shared_gap.extend(gaps)
                self.shared_weight.extend(shared_w)
            first_second = int(e0 // 1000.0)
            if first_second == int(ends[-1] // 1000.0):  # one second: one update
                emitted = sum(emitting)
                if emitted:
                    counts[first_second] = counts.get(first_second, 0) + emitted
                return
            for j in range(k):
                if emitting[j]:
                    second = int(ends[j] // 1000.0)
                    counts[second] = counts.get(second, 0) + emitting[j]
            return
        n_last = m - len(set(absent_last))
        if k > 1:
            self.shared_gap.extend([ends[j] - ends[j - 1] for j in range(1, k)])
            weights = self.shared_weight
            weights.extend(array("q", [m]) * (k - 2))
            weights.append(n_last)
            if fresh:  # their pass-1 gaps are individual samples (_first_gaps)
                at = len(weights) - (k - 1)
                weights[at] -= fresh
                if not weights[at]:
                    del weights[at]
                    del self.shared_gap[at]
        first_second = int(e0 // 1000.0)
        if first_second == int(ends[-1] // 1000.0):  # the whole run in one second: one update
            counts[first_second] = counts.get(first_second, 0) + m * (k - 1) + n_last
        else:
            for j in range(k):
                second = int(ends[j] // 1000.0)
                counts[second] = counts.get(second, 0) + (n_last if j == k - 1 else m)

    def leave(self, key: int, rids: Sequence[int]) -> None:
        """``rids`` finished on worker ``key`` (the cohort log's hook; nothing here)."""

    def settle(self) -> None:
        """Make every per-request field current (the cohort log's hook; nothing here)."""

    def settle_worker(self, key: int) -> None:
        """Make the fields of worker ``key``'s requests current (the cohort log's hook)."""

    def admission(self, rid: int, reused: int, at: float = -1.0) -> None:
        """A (re-)admission at ``at`` reusing ``reused`` prompt tokens. ``reused`` keeps the
        latest admission's value, as the reference's collector does (Dynamo 1.6.1: a request
        preempted and re-admitted reports the cache hit of its final admission)."""
        self.reused[rid] = reused
        if self.first_reused[rid] is None:
            self.first_reused[rid] = reused
            self.admitted[rid] = at

    def cached_at_first_token(self, cached_tokens: Mapping[int, int]) -> None:
        """A pass's ``OutputBatch.cached_tokens``: each request keeps the first value it is
        reported with."""
        cached = self.cached
        for rid, n in cached_tokens.items():
            if cached[rid] is None:
                cached[rid] = n

    # -- views -------------------------------------------------------------------------

    def completed_mask(self) -> Any:
        """Admitted-and-completed requests as a numpy bool array: finished and not rejected
        (reference §9.3)."""
        import numpy as np

        return np.asarray(self.completed_flags(), dtype=bool)

    def completed_flags(self) -> list[bool]:
        """:meth:`completed_mask` as a list."""
        return [d >= 0.0 and not r for d, r in zip(self.done, self.rejected)]

    def cached_tokens(self, rid: int) -> int:
        c = self.cached[rid]
        if c is None:
            c = self.first_reused[rid]
        return 0 if c is None else c
