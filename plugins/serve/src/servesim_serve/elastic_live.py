"""The elastic replay fed arrivals as they come (``servesim serve`` with ``lifecycle:``,
``planner:`` or ``faults:``; docs/elastic.md, docs/serve.md).

:class:`LiveElasticReplayer` is the aggregated replay's
:class:`~servesim.replay.elastic.ElasticReplayer` (worker lifecycles, the planner, faults)
whose workload starts empty, fed as a prefill/decode split's
:class:`~servesim_serve.disagg_live.LiveDisaggReplayer` is: :meth:`~LiveElasticReplayer.add`
appends a request, :meth:`~LiveElasticReplayer.arrive` schedules its arrival,
:meth:`~LiveElasticReplayer.cancel` its cancellation, :meth:`~LiveElasticReplayer.advance`
does everything due up to a time in the replay's order, and a
:class:`~servesim_serve.disagg_live.LiveListener` hears each pass's tokens and each request's
end. Planner ticks and faults fall on the server's simulated clock (time 0 is its start) and
go on while it serves, requests or not.

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

import heapq
from collections.abc import Sequence
from typing import Any

from servesim.contract import CancelRequest, PassCompletionEffects
from servesim.replay.driver import ARRIVAL, EXTERNAL
from servesim.replay.elastic import RETRY, ElasticReplayer
from servesim.replay.lifecycle import WorkerState
from servesim.tokens import TokenSeq
from servesim.workload.model import Turn, Workload

from servesim_serve.disagg_live import LiveListener

# An EXTERNAL event code of this replayer (servesim.replay.elastic and faults use 1-9).
CANCEL = 100


class LiveElasticReplayer(ElasticReplayer):
    """An :class:`ElasticReplayer` over requests added while it runs (module docstring).
    Takes ElasticReplayer's arguments but the workload (it starts empty)."""

    def __init__(self, engines: Sequence[Any], workload: Workload | None = None, **kwargs: Any) -> None:
        super().__init__(engines, Workload(()), **kwargs)
        self.listener = LiveListener()
        self.receipt: list[float] = []  # per request: the time it was received
        self._told: list[int] = []  # tokens told to the listener, per request
        self.cancelled: set[int] = set()
        # A failed request -> (its worker, the time, whether the worker crashed or was removed).
        self.lost_at: dict[int, tuple[int, float, bool]] = {}
        self.until = 0.0  # the latest time advanced to
        self.schedule_events()

    # -- feeding it -------------------------------------------------------------------------

    def add(self, prompt: TokenSeq, output_length: int, lora: int = 0) -> int:
        """A new request (not yet arrived; ``lora``: its LoRA adapter id); returns its id."""
        rid = len(self.turns)
        self.turns.append(Turn(rid, prompt, output_length, lora=lora))
        self.session_of.append(str(rid))
        self.session_index.append(rid)
        self.next_turn.append(-1)
        self.log.append_request(len(prompt))
        self.arrived.append(-1.0)
        self.receipt.append(-1.0)
        self._told.append(0)
        return rid

    def arrive(self, rid: int, at: float, received: float | None = None) -> None:
        """Request ``rid`` reaches the router at ``at`` (not before the last time advanced
        to); its logged arrival is ``received`` (default ``at``)."""
        self.receipt[rid] = at if received is None else min(received, at)
        self.push_event(at, ARRIVAL, rid)

    def cancel(self, rid: int, at: float) -> None:
        """Cancel request ``rid`` at ``at``, wherever it is then."""
        self.push_event(at, EXTERNAL, CANCEL, rid)

    def advance(self, until: float) -> None:
        """Everything due by ``until``, one simulated time after another."""
        self.until = max(self.until, until)
        heap = self._heap
        while heap and heap[0][0] <= until:
            ev = heapq.heappop(heap)
            self.now = ev[0]
            self._step(ev, ev[0], self.has_deadlines)

    def end_ms(self) -> float:
        """Workers still serving count GPU-seconds up to the server's present."""
        return max(self.until, self.now)

    def unfinished(self) -> bool:
        return True  # a server's cluster goes on: more requests may come at any time

    def heap_has_work(self) -> bool:
        # The planner's idle-tick guard is for requests held with no worker to serve them.
        return not self.held or super().heap_has_work()

    # -- hooks into the replay ----------------------------------------------------------------

    def _submit(self, rid: int, now: float) -> None:
        super()._submit(rid, now)
        self.arrived[rid] = self.log.arrival[rid] = self.receipt[rid]

    def _external(self, a: int, b: int, now: float) -> None:
        if a == CANCEL:
            self._cancel(b, now)
        elif a == RETRY and b in self.cancelled:
            return  # its client left while it waited for the retry
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

    def lose(self, rid: int, now: float) -> None:
        w = self.log.worker[rid]
        # ElasticReplayer.crash marks the worker restarting before it loses the requests;
        # remove_worker marks it draining.
        lost = (w, now, self.records[w].state is WorkerState.RESTARTING)
        if self._told[rid]:  # its client holds tokens: no retry from scratch under it
            self.lost_at[rid] = lost
            self.ready_router.forget(rid)
            self.failed.add(rid)
            self.log.rejected[rid] = True
            self.finish_request(rid, now)
            return
        if self.attempts.get(rid, 0) >= self.lifecycle.retry.max_attempts:
            self.lost_at[rid] = lost  # it fails (before its end is told)
        super().lose(rid, now)

    def _publish_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> bool:
        ids = eff.outputs.token_request_ids
        if ids:
            for rid in dict.fromkeys(ids):
                self._tell(rid, now)
        busy = super()._publish_pass(w, dp_rank, eff, now)
        self.listener.pass_completed(w, dp_rank, eff)
        return busy

    def _tell(self, rid: int, now: float) -> None:
        count = self.log.ntok[rid] - self._told[rid]
        if count > 0:
            self._told[rid] += count
            self.listener.tokens(rid, count, now)

    def finish_request(self, rid: int, now: float) -> None:
        self._tell(rid, now)
        super().finish_request(rid, now)
        self.listener.ended(rid, now)

    def _preempted(self, w: int, dp_rank: int, now: float, count: int) -> None:
        super()._preempted(w, dp_rank, now, count)
        self.listener.preempted(w, dp_rank, count)

    # -- the report ---------------------------------------------------------------------------

    def elastic_report(self) -> dict[str, Any]:
        out = super().elastic_report()
        requests = out["requests"]
        requests["rejected"] -= len(self.cancelled)
        requests["cancelled"] = len(self.cancelled)
        return out


__all__ = ["LiveElasticReplayer"]
