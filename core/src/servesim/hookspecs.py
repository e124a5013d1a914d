"""Every servesim hook, typed and documented (style-anchors.md rule 1).

Three families:

* registration hooks (``servesim_register_*``) receive a :class:`servesim.registry.Registry`
  and register named implementations into it; names are what YAML selects. Each is called
  once per plugin manager, on every registered plugin;
* ``servesim_add_commands`` adds CLI subcommands, and ``servesim_figure_writer`` draws the
  figures of ``servesim run --plot``;
* observer hooks (``servesim_run_started``, ``servesim_pass_completed``,
  ``servesim_request_finished``, ``servesim_report_extra``) watch a run and add report keys
  (servesim.replay.observers); with none implemented the driver makes no call at all.

Hook arguments only ever grow: a new argument is added at the end, and implementations may
accept a subset (pluggy allows it), so old plugins keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim._markers import hookspec

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from servesim.config.sim import RunConfig
    from servesim.contract import PassCompletionEffects
    from servesim.registry import Registry
    from servesim.replay.finished import FinishedRequest
    from servesim.replay.timeline import FigureWriter


@hookspec
def servesim_register_backends(registry: Registry) -> None:
    """Register scheduler backends: ``registry.add(name, RankSubclass)``.

    :param registry: the ``backend`` registry. The name is what ``engine.backend`` selects and
        also the key of the backend's own config section (``engine.<name>:``), validated by
        the rank class's ``config_class``.
    """


@hookspec
def servesim_register_timing_models(registry: Registry) -> None:
    """Register timing models: ``registry.add(name, TimingModelSubclass)``.

    :param registry: the ``timing_model`` registry; ``engine.timing_model.type`` selects one,
        and the other keys of ``engine.timing_model`` are structured into its ``config_class``.
        A model implements ``predict_prefill_ms`` and ``predict_decode_ms`` (batch means) or
        ``predict_pass_ms(shape)`` (a pass's full :class:`~servesim.timing.shape.PassShape`).
    """


@hookspec
def servesim_register_eviction_policies(registry: Registry) -> None:
    """Register KV-block eviction policies: ``registry.add(name, EvictionPolicySubclass)``.

    :param registry: the ``eviction_policy`` registry; ``engine.eviction_policy`` selects one
        by name or as ``{type: NAME, ...options}``, the options structured into the class's
        ``config_class`` (built as ``cls(config)``; ``cls()`` without one), once per KV pool.
    """


@hookspec
def servesim_register_kv_event_sinks(registry: Registry) -> None:
    """Register KV-event sinks: ``registry.add(name, KvEventSinkSubclass)``.

    :param registry: the ``kv_event_sink`` registry; entries of ``sinks.kv_events`` select one
        by ``type`` and configure it with the remaining keys. The class's
        ``from_config(config, context)`` builds it; a composing sink builds the sinks it wraps
        through ``context`` (:class:`servesim.sinks.base.SinkContext`).
    """


@hookspec
def servesim_register_fpm_sinks(registry: Registry) -> None:
    """Register forward-pass-metric sinks: ``registry.add(name, FpmSinkSubclass)``.

    :param registry: the ``fpm_sink`` registry; entries of ``sinks.fpm`` select one by ``type``.
    """


@hookspec
def servesim_register_trace_formats(registry: Registry) -> None:
    """Register workload trace readers: ``registry.add(name, reader)``.

    :param registry: the ``trace_format`` registry; ``workload.trace.format`` selects one
        (``mooncake`` is built in).
    """


@hookspec
def servesim_register_routers(registry: Registry) -> None:
    """Register request routers for multi-worker clusters: ``registry.add(name, RouterClass)``.

    :param registry: the ``router`` registry; ``cluster.router`` selects one (``round_robin``
        and ``kv`` are built in).
    """


@hookspec
def servesim_register_planners(registry: Registry) -> None:
    """Register planners, which resize the cluster's pools while a replay runs
    (servesim.replay.planning): ``registry.add(name, PlannerClass)``.

    :param registry: the ``planner`` registry; ``planner.type`` selects one (``static`` and
        ``schedule`` are built in).
    """


@hookspec
def servesim_register_schedule_policies(registry: Registry) -> None:
    """Register waiting-queue ordering policies for backends that take one (SGLang's
    ``engine.sglang.schedule_policy``): ``registry.add(name, policy)``.

    :param registry: the ``schedule_policy`` registry.
    """


@hookspec
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add subcommands to the ``servesim`` command line (as pytest's ``pytest_addoption`` and
    llm's ``register_commands`` let plugins extend theirs).

    Add each command with ``parser = subparsers.add_parser(NAME, help=...)``, declare its
    arguments on ``parser``, and name the function that runs it with
    ``parser.set_defaults(servesim_command=func)``: ``func(args: argparse.Namespace) -> int``
    returns the exit status. Raise :class:`servesim.errors.UserError` (or a subclass) for bad
    input; the CLI prints it as one line with exit status 2. A name already taken by a built-in
    command or another plugin is a :class:`~servesim.errors.PluginError` naming both.

    Keep the hook cheap: import the command's machinery inside ``func``, not at module level,
    so ``servesim run`` does not pay for commands it does not use.

    :param subparsers: the ``servesim`` parser's subparsers action.
    """


@hookspec(firstresult=True)
def servesim_figure_writer() -> FigureWriter | None:
    """The figures of ``servesim run --plot DIR`` (and ``report.plot``): return a
    :class:`~servesim.replay.timeline.FigureWriter`, or None to leave it to another plugin.
    The first answer that is not None is used (``servesim-plot`` gives one); with none, a run
    asked for figures fails before it starts with a message naming the plugin to install.

    Keep the hook cheap: return an object whose drawing machinery loads when it draws.
    """


@hookspec
def servesim_run_started(config: RunConfig) -> bool | None:
    """A run is about to start (``servesim run`` or :func:`servesim.replay.simulate`): reset
    any per-run state an observer keeps, since one process may run several simulations.

    Return False to sit this run out: the plugin's other observer hooks are then not called
    for it, and a run nobody watches keeps runs of passes. Any other result (None) watches.

    :param config: the validated configuration (``config.sim`` holds the typed sections,
        ``config.resolved()`` the full resolved configuration as plain data).
    """


@hookspec
def servesim_pass_completed(
    worker_id: int, dp_rank: int, start_ms: float, end_ms: float, effects: PassCompletionEffects
) -> None:
    """One rank's pass completed, in simulated-time order (ranks of one worker in rank order).

    Called once per rank per pass, after the driver consumed the pass (tokens logged, KV
    events and forward-pass metrics published). Observe only: do not keep ``effects`` past
    the call or change it. While any plugin implements this hook the driver steps pass by
    pass instead of committing runs of passes; the report is the same.

    :param worker_id: the worker (engine) index in the cluster (prefill workers first in a
        prefill/decode split).
    :param dp_rank: the attention data-parallel rank inside the worker.
    :param start_ms: simulated time the pass started.
    :param end_ms: simulated time it completed (its outputs are visible from then on).
    :param effects: the rank's :class:`~servesim.contract.PassCompletionEffects` (outputs,
        KV events, forward-pass metrics when a sink asked for them).
    """


@hookspec
def servesim_request_finished(request: FinishedRequest) -> None:
    """A request finished (completed, or rejected by its engine), at ``request.finished_ms``.

    Called once per request in the order requests finish. Like ``servesim_pass_completed``
    it makes the driver step pass by pass.

    :param request: a :class:`servesim.replay.finished.FinishedRequest` (ids, worker, arrival,
        first-token and finish times, token counts, whether it was rejected).
    """


@hookspec
def servesim_report_extra(report: dict[str, Any], config: RunConfig) -> Mapping[str, Any] | None:
    """Keys to add to the run's report (the JSON ``--output-json`` writes and ``--json``
    prints; the table shows only servesim's own keys).

    Return a mapping of new keys to JSON-serialisable values, or None. A key the report
    already has, or one another plugin adds, is a :class:`~servesim.errors.PluginRunError`
    naming both. Called once per run after the report is built, one plugin at a time.

    :param report: the report so far (read it; do not change it).
    :param config: the validated configuration of the run.
    """


@hookspec
def servesim_register_admission_policies(registry: Registry) -> None:
    """Register admission policies: ``registry.add(name, PolicyClass)``, a class built as
    ``PolicyClass(options, classes)`` whose ``admit(candidate)`` returns None or the reason a
    due request is turned away (:mod:`servesim.replay.admission`).

    :param registry: the ``admission_policy`` registry; ``workload.admission.type`` selects one
        (``always``, ``queue_shed`` and ``token_bucket`` are built in).
    """


HOOK_KINDS: dict[str, str] = {
    "servesim_register_backends": "backend",
    "servesim_register_timing_models": "timing_model",
    "servesim_register_eviction_policies": "eviction_policy",
    "servesim_register_kv_event_sinks": "kv_event_sink",
    "servesim_register_fpm_sinks": "fpm_sink",
    "servesim_register_trace_formats": "trace_format",
    "servesim_register_routers": "router",
    "servesim_register_schedule_policies": "schedule_policy",
    "servesim_register_admission_policies": "admission_policy",
    "servesim_register_planners": "planner",
}
"""Hook name → registry kind, in the order ``servesim plugins`` lists them. Hooks not named
here (``servesim_add_commands``, ``servesim_figure_writer`` and the observer hooks) register no named implementations."""

__all__ = [
    "HOOK_KINDS",
    "servesim_add_commands",
    "servesim_figure_writer",
    "servesim_pass_completed",
    "servesim_register_admission_policies",
    "servesim_register_backends",
    "servesim_register_eviction_policies",
    "servesim_register_fpm_sinks",
    "servesim_register_kv_event_sinks",
    "servesim_register_planners",
    "servesim_register_routers",
    "servesim_register_schedule_policies",
    "servesim_register_timing_models",
    "servesim_register_trace_formats",
    "servesim_report_extra",
    "servesim_request_finished",
    "servesim_run_started",
]
