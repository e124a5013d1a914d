"""The live driver of a prefill/decode split (``cluster.prefill_workers`` / ``decode_workers``).

The simulation is the disaggregated replay's own (:class:`servesim_serve.disagg_live.
LiveDisaggReplayer`: the prefill router, the decode router, the handoff with its transfer
time, cancellation wherever the request is), fed each request as it arrives and advanced to
the event loop's simulated time; this class keeps :class:`~servesim_serve.driver.LiveDriver`'s
pacing (one timer for the earliest pending event, stream wake-ups first-token first) and its
interface to the HTTP layer. A client's tokens are the decode worker's, released when the
decode pass that produced them ends on the wall clock; the report is ``servesim run``'s for a
split (the handoff keys included), built from the replayer's own log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.errors import SimError
from servesim.report.stats import distribution
from servesim.report.summary import build_report, clean_floats, per_request_lines
from servesim.tokens import Tokens

from servesim_serve.clock import SimClock
from servesim_serve.disagg_live import LiveDisaggReplayer, LiveListener
from servesim_serve.driver import LiveDriver
from servesim_serve.observer import Observer
from servesim_serve.records import LiveRequest, answer_latencies

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig
    from servesim.contract import PassCompletionEffects


class LiveDisaggDriver(LiveDriver, LiveListener):
    """Owns simulated time for a server of a prefill/decode split (module docstring)."""

    def __init__(self, replayer: LiveDisaggReplayer, clock: SimClock,
                 observer: Observer | None = None) -> None:
        # LiveDriver's requests, streams, timer and failure state; its engines, router and
        # cluster state are the replayer's.
        self.replayer = replayer
        self.engines = replayer.engines
        self.router = replayer.prefill_router
        self._init_streams(clock, observer)
        self._firsts: list[LiveRequest] = []  # the pass being told: first tokens, the rest
        self._later: list[LiveRequest] = []
        replayer.listener = self

    @property
    def max_in_flight(self) -> int:  # type: ignore[override]
        return self.replayer.log.max_in_flight

    @property
    def preemptions(self) -> int:  # type: ignore[override]
        return self.replayer.log.num_preemptions

    @property
    def passes(self) -> int:  # type: ignore[override]
        return self.replayer.passes

    @property
    def pass_busy_ms(self) -> list[float]:  # type: ignore[override]
        return self.replayer.pass_busy_ms

    @property
    def _heap(self) -> list[Any]:  # type: ignore[override]
        return self.replayer._heap

    # -- commands (called by the HTTP layer) -------------------------------------------

    def submit(self, prompt: list[int], max_tokens: int, thinking: int = 0,
               arrival_ms: float | None = None, lora: int = 0) -> LiveRequest:
        """Add one request and deliver it to the prefill router at the simulated time it was
        received (or at the latest time acted on, if that is later: time never goes back)."""
        if arrival_ms is None:
            now = self._catch_up()
            arrival_ms = now
        else:
            now = max(arrival_ms, self.now)
            arrival_ms = min(arrival_ms, now)
        rp = self.replayer
        rid = rp.add(Tokens(prompt, ints=True), max_tokens, lora)
        req = LiveRequest(rid, len(prompt), max_tokens, thinking, arrival_ms)
        req.lora = lora
        self.requests.append(req)
        self.in_flight += 1
        self.queued += 1
        rp.arrive(rid, now, received=arrival_ms)
        self.observer.arrived(req, None)
        self._advance(now)
        self.now = now
        self._arm()
        return req

    def cancel(self, req: LiveRequest) -> None:
        """The client went away: cancel the request wherever it is (prefill, transfer,
        decode), freeing its blocks on both sides. A request whose last token is already in
        flight completes (as in the replay)."""
        if req.finished:
            return
        try:
            now = self._catch_up()
            if req.done_ms >= 0.0 or req.cancelled or req.aborted:  # it ended just now
                return
            self.replayer.cancel(req.rid, now)
            self._advance(now)
        except SimError as exc:
            self.fail(exc)
            return
        self.observer.flush()
        self._arm()

    # -- time ---------------------------------------------------------------------------

    def _advance(self, until: float) -> None:
        self.replayer.advance(until)

    # -- what the replayer tells (servesim_serve.disagg_live.LiveListener) ----------------

    def tokens(self, rid: int, count: int, now: float) -> None:
        req = self.requests[rid]
        if not req.times:
            self.queued -= 1
            req.cached = self.replayer.log.cached_tokens(rid)
            self._firsts.append(req)
        else:
            self._later.append(req)
        req.times.extend([now] * count)
        req.steps.append(len(req.times))
        self.observer.tokens(req, count, now)

    def ended(self, rid: int, now: float) -> None:
        req = self.requests[rid]
        rp = self.replayer
        log = rp.log
        req.worker, req.dp_rank = self.home(rid)  # the rank /metrics counts its end on
        if log.admitted[rid] >= 0:
            req.admitted = log.admitted[rid]
        if rid in rp.cancelled:
            req.cancelled = True
        else:
            req.rejected = log.rejected[rid]
            req.done_ms = now
        self._ended(req)
        if req.cancelled:
            self.observer.cancelled(req, None)  # after finished(), as LiveDriver.cancel does

    def _aborted(self, req: LiveRequest) -> None:
        req.worker, req.dp_rank = self.home(req.rid)  # as ended() counts it
        super()._aborted(req)

    def pass_completed(self, w: int, dp_rank: int, eff: PassCompletionEffects) -> None:
        if self._firsts or self._later:
            self._to_wake.extend(self._firsts)
            self._to_wake.extend(self._later)
            self._firsts.clear()
            self._later.clear()
            self._schedule_wakes()
        self.observer.pass_completed(w, dp_rank, eff.metrics, eff.forward_pass_metrics)
        self.observer.flush()

    def preempted(self, w: int, dp_rank: int, count: int) -> None:
        self.observer.preempted(w, count, dp_rank)

    def home(self, rid: int) -> tuple[int, int]:
        """The ``(worker, dp_rank)`` request ``rid`` is on now (servesim_serve.vllm_metrics):
        its decode rank once its destination is activated, else its prefill rank once its
        prefill is submitted, else the decode rank reserved first (a reserve-first backend)."""
        rp = self.replayer
        if rp.times["destination_activated_ms"][rid] >= 0 or rp.prefill_worker[rid] < 0:
            return rp.decode_worker[rid], rp.decode_dp[rid]
        return rp.prefill_worker[rid], rp.prefill_dp[rid]

    # -- the report ---------------------------------------------------------------------

    def report(self, cfg: ReportConfig, resolved: dict[str, Any], *, queue_full: int,
               reasoning: bool) -> dict[str, Any]:
        """``servesim run``'s report of a split over the requests so far (cancelled requests
        fail, as in the replay, and count in ``num_cancelled``), plus the server's keys."""
        rp = self.replayer
        report = build_report(rp.log, cfg, resolved)
        extra = rp.report_extras()
        requests = self.requests
        extra["num_queue_full"] = queue_full
        extra["num_unfinished"] = sum(1 for r in requests if not r.finished)
        extra["num_aborted"] = sum(1 for r in requests if r.aborted)
        if reasoning:
            import numpy as np

            extra.update(distribution("ttfat", np.asarray(answer_latencies(requests)), cfg.percentiles))
        report.update(clean_floats(extra))
        return report

    def per_request_lines(self) -> list[str]:
        """``servesim run --per-request``'s lines of a split, plus ``cancelled``."""
        rp = self.replayer
        log = rp.log
        log.extra = {**rp.per_request_extras(), "cancelled": [r.cancelled for r in self.requests]}
        return [line + "\n" for line in per_request_lines(log)]
