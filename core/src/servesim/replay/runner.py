"""From a validated configuration to a finished replay: workload, cluster, router, sinks.

:func:`simulate` is what ``servesim run`` calls; tests and notebooks can call it too. It is
the composition point of the speed overlay: the one module that imports ``servesim.fast``
and hands its :class:`~servesim.fast.overlay.FastOverlay` to the factories and the replayer
(servesim.replay.speed; docs/architecture.md, "The speed overlay").
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from servesim.config.output_paths import GrowingFile
from servesim.config.sections import SyntheticConfig, WorkloadConfig
from servesim.errors import ConfigError, PluginRunError, UserError
from servesim.fast.overlay import FastOverlay, writes_in_process
from servesim.replay.adapter_names import resolve_adapter_names
from servesim.replay.adapters import lora_report
from servesim.replay.cluster import build_engines
from servesim.replay.driver import ProgressFn, Replayer
from servesim.replay.gc_spacing import collections_spaced
from servesim.replay.observers import Observers
from servesim.replay.release import (
    attach_release,
    refuse_lanes_without_graph,
    snapshot_workload,
)
from servesim.replay.routers import Router
from servesim.replay.scope import ReportScope
from servesim.replay.tiers import host_tier_report
from servesim.report.result import SimResult
from servesim.report.summary import build_report, clean_floats
from servesim.sinks.base import (
    SinkDeployment,
    SinkError,
    abandon_sinks,
    bind_sinks,
    lora_deployment,
    replay_done,
)
from servesim.sinks.build import build_sinks
from servesim.workload.model import Workload, mark_unique_prompts
from servesim.workload.synthetic import generate

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.config.loader import LoadedConfig
    from servesim.plugins import Plugins
    from servesim.replay.timeline import PassTimeline


def load_workload(workload: WorkloadConfig, plugins: Plugins,
                  engine: EngineConfig | None = None) -> Workload:
    """The configured trace (through its ``trace_format`` plugin) or synthetic workload.

    A trace format with a ``stream`` method reads its trace as a stream (``Workload`` of
    servesim.workload.streamed) unless ``workload.snapshot`` is set.
    With neither ``trace`` nor ``synthetic`` set, the default :class:`SyntheticConfig`
    (the built-in default scenario) is used. With ``engine`` (its section), a trace's adapter
    names resolve to its ``lora_modules`` (servesim.replay.adapter_names).
    """
    if workload.trace is not None:
        reader = plugins.trace_formats().get(workload.trace.format)
        options = {"options": workload.trace.options} if workload.trace.options else {}
        # A format that can stream its trace does (servesim.workload.streamed), unless a
        # snapshot cuts it, which needs every request as an object.
        stream = getattr(reader, "stream", None)
        if stream is None or workload.snapshot is not None:
            stream = reader.read
        read = stream(workload.trace.path, trace_block_size=workload.trace.trace_block_size,
                      **options)
        if engine is not None:
            resolve_adapter_names(read, engine)
        _check_client_concurrency(read, workload)
        _check_client_warmups(read, workload)
        return read
    return generate(workload.synthetic or SyntheticConfig(), workload.seed)


def _waits(workload: WorkloadConfig) -> bool:
    """Whether ``workload.warmup`` holds the measured requests until it ends."""
    return workload.warmup is not None and workload.warmup.wait


def _check_client_concurrency(read: Workload, workload: WorkloadConfig) -> None:
    """A trace whose client kept N requests in flight replays with N sessions at most:
    ``workload.concurrency`` (closed loop) or ``workload.max_concurrency`` (send times kept)."""
    n = read.client_concurrency
    if n is None or n in (workload.concurrency, workload.max_concurrency):
        return
    set_to = workload.concurrency if workload.concurrency is not None else workload.max_concurrency
    key = "concurrency" if workload.concurrency is not None else "max_concurrency"
    raise ConfigError(
        f"the client of {read.source} keeps {n} requests in flight (its max_concurrency); set "
        f"workload.max_concurrency: {n} (or workload.concurrency: {n} when it sends every request at once)"
        + ("" if set_to is None else f", not {set_to}"),
        path=f"workload.{key}")


def _check_client_warmups(read: Workload, workload: WorkloadConfig) -> None:
    """A trace led by warm-up sessions its client waited for replays them as a waited-for
    warmup of that size."""
    n = read.client_warmups
    warm = workload.warmup
    # (``wait`` with ``duration_s`` is refused when the config is checked)
    if not n or (warm is not None and warm.requests == n and warm.wait):
        return
    raise ConfigError(
        f"the client of {read.source} sends {n} warm-up requests and waits for them (its num_warmups); "
        f"set workload.warmup: {{requests: {n}, wait: true}}", path="workload.warmup")


def is_split(loaded: LoadedConfig) -> bool:
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
    timeline: PassTimeline | None = None,
) -> SimResult:
    """Replay ``loaded``'s workload on its cluster; sinks are closed afterwards.

    ``pass_log``: write one line per engine pass there (:mod:`servesim.replay.passlog`); only then
    are ranks asked to record their schedules. ``timeline``: collect each pass's metrics and
    the preemptions there for figures (ranks then build forward-pass metrics).
    An exception raised by an installed plugin's code becomes a
    :class:`~servesim.errors.PluginRunError` naming the plugin and its distribution (the
    original is its ``__cause__``); core's own failures pass unchanged.
    """
    try:
        with collections_spaced():
            return _simulate(loaded, record_token_times, progress, pass_log, timeline)
    except UserError:
        raise
    except Exception as exc:
        culprit = loaded.plugins.culprit(exc)
        if culprit is None:
            raise
        label, raised = culprit
        message = f"{label} failed during the run: {type(raised).__name__}: {raised}"
        if raised is not exc:  # what servesim was doing (a sink's time, a poisoned engine)
            message += f" ({exc})"
        raise PluginRunError(message) from exc


def _simulate(
    loaded: LoadedConfig,
    record_token_times: bool,
    progress: ProgressFn | None,
    pass_log: str | None,
    timeline: PassTimeline | None,
) -> SimResult:
    disaggregated = is_split(loaded)
    sim = loaded.sim
    plugins = loaded.plugins
    workload, snapshot = snapshot_workload(load_workload(sim.workload, plugins, sim.engine),
                                           sim.workload)
    router_class = plugins.routers().get(sim.cluster.router)
    block_size = sim.engine.bs
    num_workers = sum(p.workers for p in sim.cluster.pools) or sim.cluster.workers
    router: Router = router_class(num_workers, sim.engine.dp_size, block_size, loaded.router_config)
    if disaggregated and pass_log is not None:
        raise UserError("--pass-log is not supported with a prefill/decode split yet")
    built = build_sinks(loaded)
    kv_sinks, fpm_sinks = built["kv_events"], built["fpm"]
    bind_sinks([*kv_sinks, *fpm_sinks], SinkDeployment(
        num_workers=(sim.cluster.prefill_workers + sim.cluster.decode_workers if disaggregated
                     else num_workers), dp_size=sim.engine.dp_size, block_size=block_size,
        backend=sim.engine.backend, max_model_len=sim.engine.max_model_len,
        num_gpu_blocks=sim.engine.num_gpu_blocks,
        **lora_deployment(sim.engine),
    ))
    sinks = [*kv_sinks, *fpm_sinks]
    record_token_times = record_token_times or any(
        getattr(sink, "wants_token_times", False) for sink in sinks)
    observers = Observers.of(plugins)
    if observers is not None:
        observers = observers.run_started(loaded)
    if disaggregated and sim.workload.warm_cache is not None:
        raise ConfigError("a warm cache is not supported with a prefill/decode split yet",
                          path="workload.warm_cache", source=loaded.source)
    if disaggregated:
        result = _simulate_disagg(loaded, workload, kv_sinks, fpm_sinks, record_token_times, progress,
                                  timeline, observers)
        if snapshot is not None:
            result.report["snapshot"] = clean_floats(snapshot)
        return _with_extra(result, observers, loaded)
    # Aggregated replay: only the ranks and the router (which routes each request before any
    # worker has seen its tokens) read prompt hashes, so trace-unique blocks may skip them;
    # not with a warm cache, whose blocks any prompt may hit.
    if sim.workload.warm_cache is None:
        mark_unique_prompts(workload)

    elastic = sim.is_elastic
    planned = sim.planner is not None  # a planner reads pass metrics and occupancy
    speed = FastOverlay(writer_process=bool(kv_sinks or fpm_sinks) and writes_in_process(
        sim.sinks.writer, workload.num_requests))

    def make_factory(overrides: Any = None, path: str = "engine overrides") -> Any:
        factory = loaded.engine_factory(
            overrides,
            emit_kv_events=bool(kv_sinks) or router.wants_kv_events,
            emit_forward_pass_metrics=bool(fpm_sinks) or timeline is not None or planned,
            path=path,
        )
        factory.fit_to_sinks(kv_sinks)
        # Occupancy snapshots feed only the timeline's KV usage (and a planner).
        speed.fit_factory(factory, kv_sinks, router_reads_events=router.wants_kv_events,
                          record_metrics=timeline is not None or planned,
                          router=None if elastic else router, observed=observers is not None)
        if pass_log is not None:
            factory.services = attrs.evolve(factory.services, record_schedule=True)
        return factory

    spans = None
    if elastic:
        engines = []
    elif sim.cluster.pools:
        from servesim.replay.pools import build_pool_engines

        engines, spans = build_pool_engines(loaded, make_factory)
    else:
        engines = build_engines(make_factory().build, sim.cluster.workers)
    warm = None
    if sim.workload.warm_cache is not None:
        if elastic:
            raise ConfigError("a warm cache is not supported with lifecycle, planner or faults yet",
                              path="workload.warm_cache", source=loaded.source)
        from servesim.replay.warm_start import preload_engines

        warm = preload_engines(engines, sim.workload.warm_cache, block_size, router)
    pass_file = _open_pass_log(pass_log)
    writer = None
    if pass_file is not None:
        from servesim.replay.passlog import PassLogWriter  # only with --pass-log

        writer = PassLogWriter(pass_file.fh)
    scope = ReportScope.of(sim.workload, workload, plugins)
    graph = workload.has_dependencies() or snapshot is not None  # a cut may leave none
    if elastic:  # servesim.replay.elastic: lifecycle, planner, faults
        from servesim.replay.elastic_setup import build_elastic_replayer

        make: Any = partial(build_elastic_replayer, loaded, workload, make_factory)
    else:
        make = partial(Replayer, engines, workload)
    if scope is not None or graph:
        speed.runs = False
    replayer = make(
        router=router,
        block_size=block_size,
        concurrency=sim.workload.concurrency,
        max_concurrency=sim.workload.max_concurrency,
        arrival_speedup_ratio=sim.workload.arrival_speedup_ratio,
        kv_sinks=kv_sinks,
        fpm_sinks=fpm_sinks,
        record_token_times=record_token_times,
        progress=progress,
        pass_log=writer,
        timeline=timeline,
        observers=observers,
        speed=speed,
    )
    if graph:
        attach_release(replayer, sim.workload.concurrency, sim.workload.lanes, snapshot is not None,
                       max_concurrency=sim.workload.max_concurrency, warmup_wait=_waits(sim.workload))
    else:
        refuse_lanes_without_graph(sim.workload.lanes)
    if scope is not None:
        scope.attach(replayer)
    try:
        log = replayer.run()
        replay_done(sinks, log)
    except BaseException:  # failed or interrupted: the files stay PATH.partial
        abandon_sinks(sinks)
        if pass_file is not None:
            pass_file.abandon()
        raise
    finally:
        for sink in sinks:
            sink.close()
        if writer is not None:
            writer.close()
        if pass_file is not None:
            _close_pass_log(pass_file)
    session_of = replayer.session_of
    if scope is None and not elastic:
        # The report reads the log alone: the trace's objects go before its arrays are made.
        replayer.forget_workload()
        del workload, make
    if scope is None:
        report = build_report(log, sim.report, loaded.resolved())
    else:
        report, log, session_of = scope.narrow(replayer, log, sim.report, loaded.resolved())
    if snapshot is not None:
        report["snapshot"] = clean_floats(snapshot)
    if warm is not None:
        report["warm_cache"] = warm
    if spans is not None:
        from servesim.replay.pools import pool_report

        report["pools"] = clean_floats(pool_report(log, spans, replayer.pass_busy_ms, sim.report.percentiles))
    report.update(clean_floats(host_tier_report(replayer.engines, log)))
    report.update(clean_floats(lora_report(replayer.engines)))
    if elastic:
        report["elastic"] = clean_floats(replayer.elastic_report(sim.report))
    return _with_extra(SimResult(report, log, session_of, replayer.passes), observers, loaded)


def _with_extra(result: SimResult, observers: Observers | None, loaded: LoadedConfig) -> SimResult:
    """The report with the keys ``servesim_report_extra`` implementations add."""
    if observers is not None:
        result.report.update(observers.report_extra(result.report, loaded))
    return result


def _open_pass_log(path: str | None) -> GrowingFile | None:
    """The pass log's file: ``PATH.partial`` until it is closed after the replay (GrowingFile)."""
    if path is None:
        return None
    try:
        return GrowingFile(path)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def _close_pass_log(file: GrowingFile) -> None:
    try:
        file.close()
    except OSError as exc:
        raise SinkError(f"pass log {file.path}: cannot close: {exc.strerror or exc}") from None


def _simulate_disagg(
    loaded: LoadedConfig,
    workload: Workload,
    kv_sinks: list[Any],
    fpm_sinks: list[Any],
    record_token_times: bool,
    progress: ProgressFn | None,
    timeline: PassTimeline | None = None,
    observers: Observers | None = None,
) -> SimResult:
    """A prefill/decode split (servesim.replay.disagg); the report gains its handoff keys
    (and, with lifecycle, planner or faults, ``elastic``: servesim.replay.elastic_split)."""
    from servesim.replay.disagg import build_disagg_replayer

    sim = loaded.sim
    scope = ReportScope.of(sim.workload, workload, loaded.plugins)
    graph = workload.has_dependencies() or sim.workload.snapshot is not None  # a cut may leave none
    build: Any = build_disagg_replayer
    elastic = sim.is_elastic
    if elastic:
        from servesim.replay.elastic_setup import build_elastic_split

        build = build_elastic_split
    replayer = build(
        loaded, workload, kv_sinks, fpm_sinks,
        # occupancy snapshots feed only the timeline (and a planner)
        record_metrics=timeline is not None or sim.planner is not None,
        concurrency=sim.workload.concurrency,
        max_concurrency=sim.workload.max_concurrency,
        arrival_speedup_ratio=sim.workload.arrival_speedup_ratio,
        record_token_times=record_token_times,
        progress=progress,
        timeline=timeline,
        observers=observers,
        speed=FastOverlay(runs=False if scope is not None or graph else None),
    )
    if graph:
        attach_release(replayer, sim.workload.concurrency, sim.workload.lanes,
                       sim.workload.snapshot is not None, max_concurrency=sim.workload.max_concurrency,
                       warmup_wait=_waits(sim.workload))
    else:
        refuse_lanes_without_graph(sim.workload.lanes)
    if scope is not None:
        scope.attach(replayer)
    try:
        log = replayer.run()
        replay_done([*kv_sinks, *fpm_sinks], log)
    except BaseException:  # failed or interrupted: the files stay PATH.partial
        abandon_sinks([*kv_sinks, *fpm_sinks])
        raise
    finally:
        for sink in [*kv_sinks, *fpm_sinks]:
            sink.close()
    log.extra = replayer.per_request_extras()
    session_of = replayer.session_of
    if scope is None:
        report = build_report(log, sim.report, loaded.resolved())
    else:
        report, log, session_of = scope.narrow(replayer, log, sim.report, loaded.resolved())
    report.update(clean_floats(replayer.report_extras()))
    if elastic:
        report["elastic"] = clean_floats(replayer.elastic_report(sim.report))
    return SimResult(report, log, session_of, replayer.passes)
