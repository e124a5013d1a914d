"""From a validated configuration to a finished replay: workload, cluster, router, sinks.

:func:`simulate` is what ``servesim run`` calls; tests and notebooks can call it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from attrs import define

from servesim.config.sections import SyntheticConfig, WorkloadConfig
from servesim.errors import ConfigError, UserError
from servesim.passlog import PassLogWriter
from servesim.replay.cluster import build_engines
from servesim.replay.driver import ProgressFn, Replayer
from servesim.replay.report import _clean, build_report
from servesim.replay.routers import Router
from servesim.replay.stats import RequestLog
from servesim.replay.synthetic import generate
from servesim.replay.workload import Workload, mark_unique_prompts
from servesim.sinks import build_sink

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig
    from servesim.plugins import Plugins


@define
class SimResult:
    """The run's report dict, the per-request log and the session id of every request."""

    report: dict[str, Any]
    log: RequestLog
    session_ids: list[str]
    passes: int


def load_workload(workload: WorkloadConfig, plugins: Plugins) -> Workload:
    """The configured trace (through its ``trace_format`` plugin) or synthetic workload.

    With neither ``trace`` nor ``synthetic`` set, the default :class:`SyntheticConfig`
    (the built-in default scenario) is used.
    """
    if workload.trace is not None:
        reader = plugins.trace_formats().get(workload.trace.format)
        return reader.read(workload.trace.path, trace_block_size=workload.trace.trace_block_size)
    return generate(workload.synthetic or SyntheticConfig(), workload.seed)


def _check_supported(loaded: LoadedConfig) -> bool:
    """True for a prefill/decode split (both pools must be set)."""
    cluster = loaded.sim.cluster
    if not (cluster.prefill_workers or cluster.decode_workers):
        return False
    for key in ("prefill_workers", "decode_workers"):
        if getattr(cluster, key) < 1:
            raise ConfigError(
                "a prefill/decode split needs at least one prefill and one decode worker",
                path=f"cluster.{key}", source=loaded.source,
            )
    return True


def simulate(
    loaded: LoadedConfig,
    *,
    record_token_times: bool = False,
    progress: ProgressFn | None = None,
    pass_log: str | None = None,
) -> SimResult:
    """Replay ``loaded``'s workload on its cluster; sinks are closed afterwards.

    ``pass_log``: write one line per engine pass there (:mod:`servesim.passlog`); only then
    are ranks asked to record their schedules.
    """
    disaggregated = _check_supported(loaded)
    sim = loaded.sim
    plugins = loaded.plugins
    workload = load_workload(sim.workload, plugins)
    router_class = plugins.routers().get(sim.cluster.router)
    block_size = sim.engine.bs
    router: Router = router_class(
        sim.cluster.workers, sim.engine.dp_size, block_size, loaded.router_config
    )
    kv_sinks = [build_sink(cls, cfg) for _name, cls, cfg in loaded.sink_specs.get("kv_events", [])]
    fpm_sinks = [build_sink(cls, cfg) for _name, cls, cfg in loaded.sink_specs.get("fpm", [])]
    if disaggregated and pass_log is not None:
        raise UserError("--pass-log is not supported with a prefill/decode split yet")
    if disaggregated:
        return _simulate_disagg(loaded, workload, kv_sinks, fpm_sinks, record_token_times, progress)
    # Aggregated replay: only the ranks and the router (which routes each request before any
    # worker has seen its tokens) read prompt hashes, so trace-unique blocks may skip them.
    mark_unique_prompts(workload)
    factory = loaded.engine_factory(
        emit_kv_events=bool(kv_sinks) or router.wants_kv_events,
        emit_forward_pass_metrics=bool(fpm_sinks),
    )
    if router.wants_kv_events and not kv_sinks:
        factory.services = attrs.evolve(factory.services, kv_events_router_only=True)
    factory.services = attrs.evolve(factory.services, record_metrics=False)
    if pass_log is not None:
        factory.services = attrs.evolve(factory.services, record_schedule=True)
    engines = build_engines(factory.build, sim.cluster.workers)
    writer = _open_pass_log(pass_log)
    replayer = Replayer(
        engines,
        workload,
        router=router,
        block_size=block_size,
        concurrency=sim.workload.concurrency,
        arrival_speedup_ratio=sim.workload.arrival_speedup_ratio,
        kv_sinks=kv_sinks,
        fpm_sinks=fpm_sinks,
        record_token_times=record_token_times,
        progress=progress,
        pass_log=writer,
    )
    try:
        log = replayer.run()
    finally:
        for sink in [*kv_sinks, *fpm_sinks]:
            sink.close()
        if writer is not None:
            writer.close()
    report = build_report(log, sim.report, loaded.resolved())
    return SimResult(report, log, replayer.session_of, replayer.passes)


def _open_pass_log(path: str | None) -> PassLogWriter | None:
    if path is None:
        return None
    try:
        return PassLogWriter(path)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def _simulate_disagg(
    loaded: LoadedConfig,
    workload: Workload,
    kv_sinks: list[Any],
    fpm_sinks: list[Any],
    record_token_times: bool,
    progress: ProgressFn | None,
) -> SimResult:
    """A prefill/decode split (servesim.replay.disagg); the report gains its handoff keys."""
    from servesim.replay.disagg import build_disagg_replayer

    sim = loaded.sim
    replayer = build_disagg_replayer(
        loaded, workload, kv_sinks, fpm_sinks,
        concurrency=sim.workload.concurrency,
        arrival_speedup_ratio=sim.workload.arrival_speedup_ratio,
        record_token_times=record_token_times,
        progress=progress,
    )
    try:
        log = replayer.run()
    finally:
        for sink in [*kv_sinks, *fpm_sinks]:
            sink.close()
    report = build_report(log, sim.report, loaded.resolved())
    report.update(_clean(replayer.report_extras()))
    log.extra = replayer.per_request_extras()
    return SimResult(report, log, replayer.session_of, replayer.passes)
