"""The speed overlay as the runner hands it to a replay (servesim.replay.speed.SpeedOverlay).

:class:`FastOverlay` composes the pieces of :mod:`servesim.fast` for one replay: run engines
and ranks fitted to their readers (:meth:`FastOverlay.fit_factory`), runs of passes
(:class:`~servesim.fast.replay_runs.RunDriver`), the cohort log
(:class:`~servesim.fast.cohorts.CohortLog`), forward-pass metrics by column
(:mod:`~servesim.fast.fpm_runs`) and the merge buffer for several workers' sinks, in this
process or a writer process (:mod:`~servesim.fast.sink_merge`,
:mod:`~servesim.fast.sink_offload`). A replayer built without it steps every pass, with the
same results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.factory import EngineFactory
from servesim.fast.cohorts import CohortLog
from servesim.fast.engine_runs import RunEngine
from servesim.fast.event_readers import fit_to_readers
from servesim.fast.fpm_runs import encodes_fpm_runs
from servesim.fast.replay_runs import RunDriver, runs_enabled_by_env
from servesim.fast.sink_merge import SinkMerge
from servesim.replay.speed import RunDriverView, SinkMergeView
from servesim.report.stats import RequestLog
from servesim.sinks.base import FpmSink, KvEventSink


class FastOverlay:
    """The speed overlay for one replay. ``runs``: runs of passes (None: unless
    ``SERVESIM_RUNS`` turns them off); ``writer_process``: the merge buffer in a writer
    process where the sinks allow it (``sinks.writer``)."""

    def __init__(self, runs: bool | None = None, writer_process: bool = False) -> None:
        self.runs = runs_enabled_by_env() if runs is None else runs
        self.writer_process = writer_process

    def fit_factory(self, factory: EngineFactory, kv_sinks: list[Any], *,
                    router_reads_events: bool, record_metrics: bool, router: Any = None,
                    observed: bool = False) -> None:
        factory.engine_class = RunEngine
        fit_to_readers(factory, kv_sinks, router_reads_events=router_reads_events,
                       record_metrics=record_metrics, router=router, observed=observed)

    def fpm_by_run(self, fpm_sinks: Sequence[FpmSink]) -> bool:
        return encodes_fpm_runs(fpm_sinks)

    def sink_merge(self, kv_sinks: Sequence[KvEventSink],
                   fpm_sinks: Sequence[FpmSink]) -> SinkMergeView:
        if self.writer_process:
            from servesim.fast.sink_offload import SinkWriterProcess, can_offload

            if can_offload(kv_sinks, fpm_sinks):
                return SinkWriterProcess(kv_sinks[0] if kv_sinks else None,
                                         fpm_sinks[0] if fpm_sinks else None)
        return SinkMerge(kv_sinks, fpm_sinks)

    def run_driver(self, host: Any, num_workers: int, cross_worker: bool) -> RunDriverView | None:
        if not self.runs:
            return None
        if not all(isinstance(e, RunEngine) for e in host.engines):
            raise ValueError("runs of passes need the engines of a factory this overlay fitted "
                             "(FastOverlay.fit_factory)")
        return RunDriver(host, num_workers, cross_worker)

    def cohort_log(self, log: RequestLog) -> RequestLog:
        return CohortLog(log.input_length)


def writes_in_process(mode: Any, num_requests: int) -> bool:
    """Whether the sinks' lines go to a writer process (``sinks.writer``;
    servesim.fast.sink_offload.writes_in_process)."""
    from servesim.fast.sink_offload import writes_in_process as offload

    return offload(mode, num_requests)


__all__ = ["FastOverlay", "runs_enabled_by_env", "writes_in_process"]
