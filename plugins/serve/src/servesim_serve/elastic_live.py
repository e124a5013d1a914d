"""The elastic replay fed arrivals as they come (``servesim serve`` with ``lifecycle:``,
``planner:`` or ``faults:``; docs/elastic.md, docs/serve.md).

:class:`LiveElasticReplayer` is the aggregated replay's
:class:`~servesim.replay.elastic.ElasticReplayer` (worker lifecycles, the planner, faults)
whose workload starts empty, fed as :class:`~servesim_serve.live_feed.LiveFeed` feeds a
replayer: :meth:`~LiveFeed.add` appends a request, :meth:`~LiveFeed.arrive` schedules its
arrival, :meth:`~LiveElasticReplayer.cancel` its cancellation, :meth:`~LiveFeed.advance`
does everything due up to a time in the replay's order, and a
:class:`~servesim_serve.live_feed.LiveListener` hears each pass's tokens and each request's
end. Planner ticks and faults fall on the server's simulated clock (time 0 is its start) and
go on while it serves, requests or not. :class:`LiveElasticFeed` is what it shares with a
split's (servesim_serve.elastic_split_live).

Two differences from the batch replay, both because a client is reading: a request whose
worker fails under it (a crash, an ``immediate`` removal) after its stream has sent tokens
fails whatever ``lifecycle.retry`` says (a retry starts over from scratch, which a client that
holds the first tokens cannot follow); one without tokens yet is retried as in the replay. And
a client that leaves cancels its request wherever it is: held at the front end, waiting for a
retry, or on its worker (``CancelRequest``; one whose last token is already in flight
completes). A cancelled request fails in the report and counts in ``num_cancelled`` and in the
``elastic.requests.cancelled`` key (not in ``rejected``), so ``completed + failed + rejected +
cancelled = submitted``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.config.elastic import LifecycleConfig
from servesim.contract import CancelRequest
from servesim.replay.driver import EXTERNAL
from servesim.replay.elastic import RETRY, ElasticReplayer
from servesim.replay.lifecycle import WorkerState
from servesim.workload.model import Workload

from servesim_serve.live_feed import LiveFeed

# An EXTERNAL event code of this replayer (servesim.replay.elastic and faults use 1-9).
CANCEL = 100
# What a worker did to the requests it lost (LiveElasticFeed.lost_at).
CRASHED = "crashed"
REMOVED = "was removed (lifecycle.drain: immediate)"


class LiveElasticFeed(LiveFeed):
    """What a live elastic replayer, aggregated or split, adds to :class:`LiveFeed` (module
    docstring); a concrete class calls :meth:`init_elastic_feed` after :meth:`init_feed`."""

    # Declared for the type checker: the elastic replayer's own state.
    arrived: list[float]
    attempts: dict[int, int]
    lifecycle: LifecycleConfig
    cancelled: set[int]

    def init_elastic_feed(self) -> None:
        self.cancelled = set()
        # A failed request -> (the worker, the time, what the worker did: CRASHED, REMOVED, ...).
        self.lost_at: dict[int, tuple[int, float, str]] = {}
        self._failing: tuple[int, str] | None = None  # the worker failing now, and how
        self.schedule_events()

    def add_columns(self, rid: int) -> None:
        super().add_columns(rid)
        self.arrived.append(-1.0)

    def end_ms(self) -> float:
        """Workers still serving count GPU-seconds up to the server's present."""
        return max(self.until, self.now)

    def unfinished(self) -> bool:
        return True  # a server's cluster goes on: more requests may come at any time

    def heap_has_work(self) -> bool:
        # The planner's idle-tick guard is for requests held with no worker to serve them.
        return not self.waiting_count() or super().heap_has_work()  # type: ignore[misc]

    # -- hooks into the replay ----------------------------------------------------------------

    def _submit(self, rid: int, now: float) -> None:
        super()._submit(rid, now)  # type: ignore[misc]
        self.arrived[rid] = self.log.arrival[rid] = self.receipt[rid]

    def _external(self, a: int, b: int, now: float) -> None:
        if a == RETRY and b in self.cancelled:
            return  # its client left while it waited for the retry
        super()._external(a, b, now)  # type: ignore[misc]

    def crash(self, w: int, now: float, restart_ms: float) -> bool:
        self._failing = (w, CRASHED)
        try:
            return bool(super().crash(w, now, restart_ms))  # type: ignore[misc]
        finally:
            self._failing = None

    def abort_requests(self, w: int, now: float) -> None:
        self._failing = (w, REMOVED)
        try:
            super().abort_requests(w, now)  # type: ignore[misc]
        finally:
            self._failing = None

    def lose(self, rid: int, now: float) -> None:
        failing = self._failing
        assert failing is not None, "a request is lost only with a failing worker"
        w, how = failing
        if self._told[rid]:  # its client holds tokens: no retry from scratch under it
            self.attempts[rid] = self.lifecycle.retry.max_attempts
        if self.attempts.get(rid, 0) >= self.lifecycle.retry.max_attempts:
            self.lost_at[rid] = (w, now, how)  # it fails (before its end is told)
        super().lose(rid, now)  # type: ignore[misc]

    # -- the report ---------------------------------------------------------------------------

    def elastic_report(self, report: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = super().elastic_report(report)  # type: ignore[misc]
        requests = out["requests"]
        requests["rejected"] -= len(self.cancelled)
        requests["cancelled"] = len(self.cancelled)
        return out

    # -- the replayer's own (declared for the type checker) ------------------------------------

    if TYPE_CHECKING:
        def schedule_events(self) -> None: ...
        def waiting_count(self) -> int: ...


class LiveElasticReplayer(LiveElasticFeed, ElasticReplayer):
    """An :class:`ElasticReplayer` over requests added while it runs (module docstring).
    Takes ElasticReplayer's arguments but the workload (it starts empty)."""

    def __init__(self, engines: Sequence[Any], workload: Workload | None = None, **kwargs: Any) -> None:
        super().__init__(engines, Workload(()), **kwargs)
        self.init_feed()
        self.init_elastic_feed()

    def cancel(self, rid: int, at: float) -> None:
        """Cancel request ``rid`` at ``at``, wherever it is then."""
        self.push_event(at, EXTERNAL, CANCEL, rid)

    def _external(self, a: int, b: int, now: float) -> None:
        if a == CANCEL:
            self._cancel(b, now)
        else:
            super()._external(a, b, now)

    def _cancel(self, rid: int, now: float) -> None:
        log = self.log
        if self.arrived[rid] < 0.0 or log.done[rid] >= 0.0 or rid in self.cancelled:
            return
        if rid in self.ready_router.routed_to:
            w, dp = log.worker[rid], log.dp_rank[rid]
            self.internal_work_due(w, now)
            eff = self.engines[w].apply(dp, CancelRequest(rid), now)
            self.dirty.add(w)
            if eff.kv_events:
                self.publish_kv(w, now, eff.kv_events)
            if rid not in eff.retired_requests:
                return  # its last token is in flight: it completes
            if self.records[w].state is WorkerState.DRAINING:
                self.stop_if_drained(w, now)
        else:
            # Held at the front end or waiting for a retry: not in the in-flight count.
            if rid in self.held:
                self.held.remove(rid)
            self._in_flight += 1
        self.cancelled.add(rid)
        log.rejected[rid] = True
        self.finish_request(rid, now)


__all__ = ["CANCEL", "CRASHED", "REMOVED", "LiveElasticFeed", "LiveElasticReplayer"]
