"""A request log that records a worker's steady batch without visiting every member.

Between arrivals a worker's batch is mostly the same requests emitting one token per pass,
all at the same times. :class:`CohortLog` keeps such a group as one *cohort* per worker: the
members' ids in batch order, the time of their last token ``t`` and how many tokens each
emitted since joining ``n``. A member's ``last`` is then stale (it is ``t``) and its ``ntok``
holds its count minus ``n``; the pass or run that the whole cohort emits in costs one shared
gap, whatever the batch size. Only the members that join or leave are visited.

Who joins: the members of a run of passes (servesim.fast.replay_runs) that emitted at its last
pass and did not finish with it. They are past their second token, so no gap of theirs is a
time to second token (which must stay an individual sample, stats.RequestLog.tokens), and
requests in runs always complete, so their gaps need no completion mask (as the run's
shared gaps).

How the cohort is recognised: the rank lists a pass's tokens and a run's members in batch
order, and a steady batch only drops members (finished) and appends them (admitted). A call
whose id list starts with exactly the cohort's ids is the cohort emitting; the ids after it
are recorded individually (and, after a run, join). A pass none of whose ids is in the
cohort leaves it as it is: its members did not emit (SGLang runs prefill passes without the
decoding batch). Anything else (a member preempted or held back by the token budget)
dissolves the cohort first: its members' fields are written
back and the call is recorded as by :class:`~servesim.report.stats.RequestLog`. Members
that finish leave one at a time (:meth:`CohortLog.leave`, and ``completed`` of a run).

The recorded statistics are those of the plain log: the same gaps (as a weighted multiset:
the report reads nothing else of them), the same per-second counts, and, after
:meth:`CohortLog.settle`, the same per-request fields. Per-request token-time lists are not
kept here: the plain log is used when they are asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.report.stats import RequestLog, run_token_counts


class _Cohort:
    __slots__ = ("ids", "members", "t", "n")

    def __init__(self, ids: list[int], t: float) -> None:
        self.ids = ids  # batch order
        self.members = set(ids)
        self.t = t  # every member's last token time
        self.n = 0  # tokens each member emitted since the cohort began (see ntok)


class CohortLog(RequestLog):
    """:class:`RequestLog` with one cohort per worker (see the module docstring)."""

    def __init__(self, input_lengths: Sequence[int]) -> None:
        super().__init__(input_lengths)
        self.cohorts: dict[int, _Cohort] = {}

    def tokens(self, rids: Sequence[int], now: float, key: int | None = None) -> list[int]:
        if key is not None and (c := self.cohorts.get(key)) is not None:
            ids = c.ids
            size = len(ids)
            if rids[:size] == ids:
                self.shared_gap.append(now - c.t)
                self.shared_weight.append(size)
                c.t = now
                c.n += 1
                second = int(now // 1000.0)
                counts = self.tokens_per_second
                counts[second] = counts.get(second, 0) + size
                if len(rids) == size:
                    return []
                return super().tokens(rids[size:], now)
            if not c.members.isdisjoint(rids):
                self._dissolve(key)
            # else: a pass the cohort sat out (SGLang's prefill passes run without the
            # decoding batch): its members' last tokens stay at ``t``.
        return super().tokens(rids, now)

    def run_tokens(self, members: Sequence[int], absent_last: Sequence[int],
                   ends: Sequence[float], start: float | None = None,
                   completed_before: dict[int, list[int]] | None = None,
                   key: int | None = None, completed: Sequence[int] = ()) -> None:
        c = self.cohorts.get(key) if key is not None else None
        if key is not None and c is not None and members[:len(c.ids)] != c.ids:
            self._dissolve(key)
            c = None
        if key is None or c is None:
            super().run_tokens(members, absent_last, ends, start, completed_before)
            if key is not None:
                self._form(key, members, absent_last, completed_before, completed, ends[-1],
                           len(ends))
            return
        k = len(ends)
        ids = c.ids
        count = run_token_counts(k, absent_last, completed_before)
        outsiders = members[len(ids):]
        at_start, fresh = self._first_gaps(outsiders, count, k, ends, start) if outsiders else (0, 0)
        # The cohort's first gaps, then the members leaving it early.
        ntok, last = self.ntok, self.last
        outs = set(outsiders) if outsiders and (count or completed) else ()
        leaving = [(rid, n) for rid, n in count.items() if rid not in outs] if count else ()
        emitted = len(ids) - sum(1 for _rid, n in leaving if n == 0)
        if emitted:
            self.shared_gap.append(ends[0] - c.t)
            self.shared_weight.append(emitted)
        inside = c.members
        for rid, n in leaving:
            ntok[rid] += c.n + n
            last[rid] = ends[n - 1] if n else c.t
            ids.remove(rid)
            inside.discard(rid)
        c.n += k
        c.t = ends[-1]
        for rid in completed:  # finished with the last pass: leave after it
            if rid not in outs:
                ntok[rid] += c.n
                last[rid] = c.t
                ids.remove(rid)
                inside.discard(rid)
        if outsiders:
            done = set(completed)
            # (not a member with one token yet, admitted by the run's only pass: its next
            # gap is its time to second token, an individual sample)
            joining = [rid for rid in outsiders
                       if (count is None or rid not in count) and rid not in done
                       and ntok[rid] > 1]
            n = c.n
            for rid in joining:
                ntok[rid] -= n
            ids.extend(joining)
            inside.update(joining)
        if not ids:
            del self.cohorts[key]
        self._shared_gaps(len(members), k, ends, start, at_start, absent_last, completed_before,
                          fresh)

    def leave(self, key: int, rids: Sequence[int]) -> None:
        c = self.cohorts.get(key)
        if c is None:
            return
        ids, members = c.ids, c.members
        for rid in rids:
            if rid in members:
                self.ntok[rid] += c.n
                self.last[rid] = c.t
                ids.remove(rid)
                members.discard(rid)
        if not ids:
            del self.cohorts[key]

    def settle(self) -> None:
        for key in list(self.cohorts):
            self._dissolve(key)

    def settle_worker(self, key: int) -> None:
        """Make the fields of ``key``'s requests current (before reading ``ntok``)."""
        if key in self.cohorts:
            self._dissolve(key)

    def _form(self, key: int, members: Sequence[int], absent_last: Sequence[int],
              completed_before: dict[int, list[int]] | None, completed: Sequence[int],
              t: float, k: int = 2) -> None:
        """After a run recorded member by member: its members that emitted at the last pass
        (at ``t``) and go on form the worker's cohort (``n`` 0: no field changes)."""
        out = set(absent_last).union(completed)
        if completed_before:
            for rids in completed_before.values():
                out.update(rids)
        ids = [rid for rid in members if rid not in out] if out else list(members)
        if k == 1:  # a member admitted by the run's only pass has one token: not past its second
            ntok = self.ntok
            ids = [rid for rid in ids if ntok[rid] > 1]
        if ids:
            self.cohorts[key] = _Cohort(ids, t)

    def _dissolve(self, key: int) -> None:
        c = self.cohorts.pop(key)
        n, t = c.n, c.t
        ntok, last = self.ntok, self.last
        for rid in c.ids:
            ntok[rid] += n
            last[rid] = t


__all__ = ["CohortLog"]
