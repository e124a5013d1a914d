"""The replay's speed seam: what the composition point may hand a replayer to make it fast.

A :class:`~servesim.replay.driver.Replayer` built without a :class:`SpeedOverlay` steps every
pass and publishes every batch to the sinks as it happens: the reference semantics. The
runner (:mod:`servesim.replay.runner`) hands it the speed overlay
(``servesim.fast.overlay.FastOverlay``), which supplies the pieces below; the results are the
same, byte for byte (docs/architecture.md, "The speed overlay"). The driver reaches the pieces
only through these protocols, so no reference module imports ``servesim.fast``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from servesim.contract import ForwardPassMetrics, KvEvent
    from servesim.factory import EngineFactory
    from servesim.report.stats import RequestLog
    from servesim.sinks.base import FpmSink, KvEventSink

#: Merge-buffer entries past which the driver releases what is complete when its time moves.
FLUSH_AT: Final = 512


class SinkMergeView(Protocol):
    """A buffer of several workers' sink output, handed on in one order that does not depend
    on runs of passes (``servesim.fast.sink_merge.SinkMerge``, or the writer process standing
    in for one)."""

    buf: list[Any]

    def kv(self, w: int, at: float, start: float, events: Sequence[KvEvent]) -> None: ...

    def fpm(self, w: int, at: float, start: float, metrics: ForwardPassMetrics) -> None: ...

    def fpm_run_of(self, w: int, ats: list[float], start: float, run: Any) -> None: ...

    def release(self, watermark: float) -> None: ...

    def release_all(self) -> None: ...

    def finish(self) -> None: ...


class RunDriverView(Protocol):
    """The run bookkeeping of one replay (``servesim.fast.replay_runs.RunDriver``): what the
    driver asks of it at each arrival, pass start and pass end."""

    #: ``(time, seq)`` of every event that is not a pass end.
    ext: list[tuple[float, int]]
    #: Per worker, its in-flight run (``servesim.fast.runs.EngineRunStarted``) or None.
    in_flight: list[Any]
    count: int  # runs in flight
    with_done: int  # runs in flight with completions before their last pass
    flush: bool  # whether KV events of run passes go out before routing
    cross_worker: bool  # whether a pass end can release work at its own time
    horizon_of: Callable[[int, float, float], float] | None

    def try_run(self, w: int, engine: Any, now: float) -> bool: ...

    def continue_run(self, w: int, now: float) -> bool: ...

    def complete(self, w: int, now: float) -> None: ...

    def release_done(self, now: float) -> None: ...

    def release_kv(self, now: float) -> None: ...

    def check_routed(self, w: int, now: float) -> None: ...


class SpeedOverlay(Protocol):
    """What makes a replay fast without changing what it computes."""

    def fit_factory(self, factory: EngineFactory, kv_sinks: list[Any], *,
                    router_reads_events: bool, record_metrics: bool, router: Any = None,
                    observed: bool = False) -> None:
        """Fit the engines ``factory`` builds from now on to the replay: engines that may
        commit runs of passes, ranks told who reads their output."""
        ...

    def fpm_by_run(self, fpm_sinks: Sequence[FpmSink]) -> bool:
        """Whether runs' forward-pass metrics may go to these sinks by column."""
        ...

    def sink_merge(self, kv_sinks: Sequence[KvEventSink],
                   fpm_sinks: Sequence[FpmSink]) -> SinkMergeView:
        """The merge buffer for several workers' sink output."""
        ...

    def run_driver(self, host: Any, num_workers: int, cross_worker: bool) -> RunDriverView | None:
        """The run bookkeeping of replayer ``host``; None when runs are off."""
        ...

    def cohort_log(self, log: RequestLog) -> RequestLog:
        """A request log that keeps a steady batch's tokens as one cohort, for ``log``'s
        requests (a replay with runs and no per-token times)."""
        ...


__all__ = ["FLUSH_AT", "RunDriverView", "SinkMergeView", "SpeedOverlay"]
