"""The live drivers of an elastic, failing cluster (``lifecycle:``, ``planner:``,
``faults:``; docs/elastic.md, docs/serve.md): aggregated workers (:class:`LiveElasticDriver`)
or a prefill/decode split (:class:`LiveElasticSplitDriver`, over
:class:`servesim_serve.elastic_split_live.LiveElasticSplitReplayer`).

The simulation is the elastic replay's own (:class:`servesim_serve.elastic_live.
LiveElasticReplayer`: workers starting, warming up, draining, crashing and restarting, the
planner's ticks applied as they fall), fed each request as it arrives and advanced to the event
loop's simulated time with :class:`~servesim_serve.disagg_driver.LiveDisaggDriver`'s pacing,
streams and listener. What differs:

- a request lost with its worker (a crash, an ``immediate`` removal; in a split, also a KV
  transfer that failed with ``fallback: fail``) ends as vLLM ends a
  request whose engine died: its record carries the error (:attr:`LiveRequest.error`), which a
  stream sends as an error event before ``[DONE]`` and a whole-body request gets as a 500
  ``InternalServerError`` (servesim_serve.streams, servesim_serve.app);
- ``/metrics`` gains ``servesim:workers`` (workers by pool and state) and reads nothing from a
  stopped or crashed worker's discarded engine (:meth:`Observer.watch_cluster`);
- the report is the aggregated report of the replay's log (a split's: with its handoff keys)
  with its ``elastic`` section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.replay.lifecycle import WorkerState
from servesim.report.stats import distribution
from servesim.report.summary import build_report, clean_floats, per_request_lines

from servesim_serve.clock import SimClock
from servesim_serve.disagg_driver import LiveDisaggDriver
from servesim_serve.elastic_live import LiveElasticReplayer
from servesim_serve.elastic_split_live import LiveElasticSplitReplayer
from servesim_serve.observer import Observer
from servesim_serve.records import LiveRequest, answer_latencies

if TYPE_CHECKING:
    from servesim.config.sections import ReportConfig

# The first words of the error a lost request's client gets: vLLM's ``EngineDeadError``
# message opens so (vllm/v1/engine/exceptions.py, v0.32); the rest says what happened.
ENGINE_DEAD = "EngineCore encountered an issue"


class ElasticDriving:
    """What an elastic cluster's driver, aggregated or split, adds to
    :class:`~servesim_serve.disagg_driver.LiveDisaggDriver` (module docstring): a lost
    request's error, and the workers for ``/metrics``."""

    replayer: Any
    requests: list[LiveRequest]

    def ended(self, rid: int, now: float) -> None:
        faults = self.replayer.faults
        if faults is not None:  # turned away on arrival (faults.rejections), or None
            self.requests[rid].injected = faults.reason_of.get(rid)
        lost = self.replayer.lost_at.get(rid)
        if lost is not None:
            w, at, how = lost
            self.requests[rid].error = (f"{ENGINE_DEAD}: worker {w} {how} at {at:g} ms (simulated) "
                                        "with this request in flight")
        super().ended(rid, now)  # type: ignore[misc]

    # -- for /metrics -----------------------------------------------------------------------

    def worker_counts(self) -> list[tuple[str, str, int]]:
        """``(pool, state, workers)`` for every pool and state, in pool and state order."""
        rp = self.replayer
        counts = {(p.name, s.value): 0 for p in rp.pools for s in WorkerState}
        for rec in rp.records:
            counts[(rp.pools[rec.pool].name, rec.state.value)] += 1
        return [(pool, state, n) for (pool, state), n in counts.items()]

    def dead_workers(self) -> set[int]:
        """Workers whose engine is discarded (stopped, or crashed and not yet restarted)."""
        dead: set[int] = self.replayer.dead
        return dead


class LiveElasticDriver(ElasticDriving, LiveDisaggDriver):
    """Owns simulated time for a server of an elastic cluster (module docstring)."""

    def __init__(self, replayer: LiveElasticReplayer, clock: SimClock,
                 observer: Observer | None = None) -> None:
        self.replayer = replayer
        self.engines = replayer.engines  # the replayer's list: added workers appear in it
        self.router = replayer.router
        self._init_streams(clock, observer)
        self._firsts: list[LiveRequest] = []
        self._later: list[LiveRequest] = []
        replayer.listener = self
        self.observer.watch_cluster(self)

    def home(self, rid: int) -> tuple[int, int]:
        """The ``(worker, dp_rank)`` request ``rid`` is on now (ended: the one it ended on);
        ``(-1, 0)`` while it is on none (held for want of a ready worker, waiting for a
        retry)."""
        rp = self.replayer
        log = rp.log
        if rid in rp.ready_router.routed_to or log.done[rid] >= 0.0:
            return log.worker[rid], log.dp_rank[rid]
        return -1, 0

    # -- the report ---------------------------------------------------------------------

    def report(self, cfg: ReportConfig, resolved: dict[str, Any], *, queue_full: int,
               reasoning: bool) -> dict[str, Any]:
        """The aggregated report of the requests so far (cancelled and lost requests fail;
        cancelled ones count in ``num_cancelled``), the server's keys, and ``elastic``."""
        rp: Any = self.replayer
        report = build_report(rp.log, cfg, resolved)
        requests = self.requests
        extra: dict[str, Any] = {
            "num_cancelled": len(rp.cancelled),
            "num_queue_full": queue_full,
            "num_unfinished": sum(1 for r in requests if not r.finished),
            "num_aborted": sum(1 for r in requests if r.aborted),
        }
        if reasoning:
            import numpy as np

            extra.update(distribution("ttfat", np.asarray(answer_latencies(requests)), cfg.percentiles))
        report.update(clean_floats(extra))
        report["elastic"] = clean_floats(rp.elastic_report(cfg))
        return report

    def per_request_lines(self) -> list[str]:
        """``servesim run --per-request``'s lines, plus ``cancelled``."""
        rp: Any = self.replayer
        log = rp.log
        log.extra = {"cancelled": [r.cancelled for r in self.requests]}
        if any(t.lora for t in rp.turns):  # as the replay names them
            log.extra = {"lora": [t.lora for t in rp.turns], **log.extra}
        return [line + "\n" for line in per_request_lines(log)]


class LiveElasticSplitDriver(ElasticDriving, LiveDisaggDriver):
    """Owns simulated time for a server of an elastic prefill/decode split
    (servesim_serve.elastic_split_live): the split's driver, the elastic cluster's error
    events and workers, and the split's report with ``elastic``."""

    def __init__(self, replayer: LiveElasticSplitReplayer, clock: SimClock,
                 observer: Observer | None = None) -> None:
        super().__init__(replayer, clock, observer)  # type: ignore[arg-type]
        self.observer.watch_cluster(self)

    def home(self, rid: int) -> tuple[int, int]:
        """As a split's (:meth:`LiveDisaggDriver.home`); ``(-1, 0)`` while the request is on
        no worker (waiting for a ready one, waiting for a retry, lost)."""
        w, dp = super().home(rid)
        return (w, dp) if w >= 0 else (-1, 0)

    def report(self, cfg: ReportConfig, resolved: dict[str, Any], *, queue_full: int,
               reasoning: bool) -> dict[str, Any]:
        """The split's report of the requests so far and the server's keys, and ``elastic``
        (as ``servesim run`` reports an elastic split)."""
        report = super().report(cfg, resolved, queue_full=queue_full, reasoning=reasoning)
        report["elastic"] = clean_floats(self.replayer.elastic_report(cfg))
        return report


__all__ = ["ElasticDriving", "LiveElasticDriver", "LiveElasticSplitDriver"]
