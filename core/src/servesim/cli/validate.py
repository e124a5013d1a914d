"""``servesim validate``: construct every plugin a config selects, without running it.

Loading a config checks names and option types; some problems show only when a plugin is
built (an abstract class, a ``ValueError`` in a constructor, a nested sink spec, a file a sink
cannot create). :func:`construct_all` builds each configured plugin once, in the order a run
would, and turns any failure into one :class:`~servesim.errors.ConfigError`
``KEY.PATH: message (plugin NAME from DIST)`` (exit 2, no traceback). Nothing is run: no
pass, no trace replay, and sinks are built with ``validating=True``, so they create no files.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servesim.config.plugin_build import built
from servesim.errors import ConfigError
from servesim.sinks.build import build_sinks

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig


def _construct(loaded: LoadedConfig, kind: str, name: str, path: str, build: Callable[[], Any]) -> Any:
    """``build()``, with any failure named by ``path`` and the plugin behind ``name``
    (servesim.config.plugin_build, as a run names it)."""
    return built(loaded.plugins, loaded.source, kind, name, path, build)


def spec_name(spec: Any) -> str:
    """A configured plugin's name: the spec itself, or the ``type`` of a mapping spec (the
    loader has checked that one is there)."""
    return str(spec["type"]) if isinstance(spec, dict) else str(spec)


def _engine_roles(loaded: LoadedConfig) -> list[tuple[str, dict[str, Any] | None]]:
    """``(key path, engine overrides)`` of every engine a run builds."""
    cluster = loaded.sim.cluster
    if cluster.prefill_workers or cluster.decode_workers:
        return [
            (f"cluster.{role}_engine", {**getattr(cluster, f"{role}_engine"), "worker_type": role})
            for role in ("prefill", "decode")
        ]
    return [("engine", None)]


def _construct_pools(loaded: LoadedConfig) -> None:
    """Each of ``cluster.pools``: its own timing model, then one engine of it."""
    from servesim.config.loader import build_engine_timing

    for i, pool in enumerate(loaded.sim.cluster.pools):
        path = f"cluster.pools[{i}].engine"
        engine = loaded.resolve_overrides(pool.engine, path)
        build = functools.partial(build_engine_timing, engine, path, loaded.source)
        _construct(loaded, "timing_model", engine.timing_type, f"{path}.timing_model", build)
        # The factory names a backend that fails to build as a run does (EngineFactory.name_failure).
        loaded.engine_factory(pool.engine, path=path).build(0)


def construct_all(loaded: LoadedConfig) -> None:
    """Build the timing model, the eviction policy, one engine of every role (its backend's
    ranks) and of every pool (its timing model first), the router and every sink (nested
    ones too), then close the sinks."""
    engine = loaded.engine
    sim = loaded.sim
    _construct(loaded, "timing_model", engine.timing_type, "engine.timing_model", loaded.timing_model)
    # The eviction policy: one instance per KV pool at run time; built once here. Whether the
    # backend can honour it belongs to the backend's validate_config (checked while loading).
    _construct(loaded, "eviction_policy", spec_name(sim.engine.eviction_policy), "engine.eviction_policy", loaded.eviction_factory)
    for path, overrides in _engine_roles(loaded):
        # The factory names a backend that fails to build as a run does (EngineFactory.name_failure).
        loaded.engine_factory(overrides, path=path).build(0)
    _construct_pools(loaded)
    cluster = sim.cluster
    router_class = loaded.plugins.routers().get(cluster.router)
    workers = cluster.prefill_workers or cluster.workers
    _construct(
        loaded,
        "router",
        cluster.router,
        "cluster.router",
        lambda: router_class(workers, sim.engine.dp_size, sim.engine.bs, loaded.router_config),
    )
    built = build_sinks(loaded, validating=True)
    for sinks in built.values():
        for sink in sinks:
            with contextlib.suppress(Exception):  # built only to be checked
                sink.close()


def check_outputs(loaded: LoadedConfig) -> None:
    """The report's output files (``report.output_json``, ``report.per_request``) and its
    figures folder (``report.plot``) can be written: not a folder (a file for the figures),
    and inside a folder that exists writable or can be created (servesim.config.output_paths).
    The JSONL sinks' files are checked as the sinks are built."""
    from servesim.config.output_paths import file_problem, folder_problem

    report = loaded.sim.report
    for key, check in (("output_json", file_problem), ("per_request", file_problem),
                       ("plot", folder_problem)):
        path = getattr(report, key)
        problem = check(path) if path else None
        if problem is not None:
            what = "the figures folder " if key == "plot" else ""
            raise ConfigError(f"cannot write {what}{path!r}: {problem}", path=f"report.{key}",
                              source=loaded.source)


__all__ = ["check_outputs", "construct_all", "spec_name"]
