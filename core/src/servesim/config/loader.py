"""YAML → :class:`LoadedConfig`: one converter, ``--set`` overrides, plugin-owned sections.

docs/configuration.md and style-anchors.md rule 9: the core sections are structured by the one
converter (unknown keys forbidden); the backend's own section ``engine.<backend>:`` and the
timing model's options ``engine.timing_model:`` are structured *after* their plugin is looked
up, by the class that plugin provides. Every problem found is reported in one
:class:`~servesim.errors.ConfigError` naming the source, the key path, the bad value and what
was expected (rule 10); loading never raises anything else for bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from servesim.config.capabilities import engine_needs, split_needs, workload_needs
from servesim.config.checks import check_engine, check_sections
from servesim.config.converter import Problem, make_converter, show, structure_at, unknown_key_message
from servesim.config.direct_convert import LazyConverter
from servesim.config.engine import EngineConfig, resolve_block_size
from servesim.config.plugin_build import engine_failure
from servesim.config.sections import ClusterConfig, ReportConfig, SinksConfig, WorkloadConfig
from servesim.config.sim import ELASTIC, SECTIONS, SimConfig
from servesim.config.workload_scope import admission_problems, drop_unset_scope
from servesim.config.yaml_io import apply_sets, merge_files
from servesim.contract import WorkerType
from servesim.errors import ConfigError, PluginError
from servesim.factory import EngineFactory
from servesim.kv.eviction import eviction_refusal, policy_factory
from servesim.mechanics.lora import LORA_ENGINE_KEYS
from servesim.plugins import Plugins, disabled_hint
from servesim.timing.base import TimingModel
from servesim.timing.base import overrides as timing_overrides

if TYPE_CHECKING:
    import cattrs

DEFAULT_TIMING_MODEL = "polynomial"
AUTO = "auto"
SINK_LISTS: tuple[tuple[str, str], ...] = (("kv_events", "kv_event_sink"), ("fpm", "fpm_sink"))


@attrs.define
class EngineResolution:
    """One validated engine section: its config (block size resolved) and its plugins."""

    config: EngineConfig
    rank_class: type
    backend_config: Any
    timing_type: str
    timing_class: type[TimingModel]
    timing_config: Any
    eviction_class: Callable[[], Any]


@attrs.define
class LoadContext:
    conv: cattrs.Converter | LazyConverter
    plugins: Plugins
    source: str | None
    set_origins: dict[str, str]

    def fail(self, problems: list[Problem]) -> ConfigError:
        return config_error(problems, self.source, self.set_origins)


def config_error(problems: list[Problem], source: str | None, set_origins: Mapping[str, str]) -> ConfigError:
    """One :class:`ConfigError` for all ``problems``, attributing ``--set`` keys to their flag."""

    def origin(path: str) -> str | None:
        # The most specific --set wins: the key itself, then the closest enclosing or
        # enclosed key (a class-level problem at engine.timing_model set by ...prefill_ms).
        best: tuple[int, str] | None = None
        for key, item in set_origins.items():
            if path == key:
                return item
            if path.startswith((key + ".", key + "[")) or key.startswith(path + "."):
                score = -abs(len(key) - len(path))
                if best is None or score > best[0]:
                    best = (score, item)
        return best[1] if best else None

    if len(problems) == 1:
        path, msg = problems[0]
        return ConfigError(msg, path=path or None, source=origin(path) or source)
    lines = []
    for path, msg in problems:
        from_set = origin(path)
        lines.append(f"  {path or '<top level>'}: {msg}" + (f" (from {from_set})" if from_set else ""))
    err = ConfigError(f"{len(problems)} problems:\n" + "\n".join(lines), source=source)
    err.path = problems[0][0]
    return err


def merge_engine(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base`` recursively. A ``timing_model`` override that names a
    different ``type`` replaces the base's model instead of mixing two models' options."""
    out = dict(base)
    for key, value in over.items():
        prev = out.get(key)
        if isinstance(value, Mapping) and isinstance(prev, Mapping):
            switch = (
                key == "timing_model"
                and "type" in value
                and value["type"] != prev.get("type", DEFAULT_TIMING_MODEL)
            )
            out[key] = dict(value) if switch else merge_engine(prev, value)
        else:
            out[key] = value
    return out


def _lookup(ctx: LoadContext, kind: str, name: Any, path: str, problems: list[Problem]) -> Any:
    if not isinstance(name, str):
        problems.append((path, f"expected a {kind.replace('_', ' ')} name, got {show(name)}"))
        return None
    try:
        return ctx.plugins.registry(kind).get(name)
    except PluginError as exc:
        hint = disabled_hint()
        problems.append((path, f"{exc} ({hint})" if hint else str(exc)))
        return None


def _options(ctx: LoadContext, obj: Any, data: Any, path: str, what: str, problems: list[Problem]) -> Any:
    """Structure a plugin's options into its ``config_class`` (None if it has none)."""
    config_class = getattr(obj, "config_class", None)
    data = {} if data is None else data
    if config_class is None:
        if not isinstance(data, Mapping):
            problems.append((path, f"expected a mapping, got {show(data)}"))
        else:
            problems.extend((f"{path}.{k}", f"unknown key; {what} takes no options") for k in data)
        return None
    value, found = structure_at(ctx.conv, data, config_class, path)
    problems.extend(found)
    if value is not None and attrs.has(type(value)):
        # Core sections range-check every number; a plugin's options may not, and NaN passes
        # any comparison-based check (a NaN router weight sent every request to worker 0).
        for f in attrs.fields(type(value)):
            item = getattr(value, f.name)
            if isinstance(item, float) and item != item:
                problems.append((f"{path}.{f.name}", "expected a number, got nan"))
    return value


def _eviction_factory(
    ctx: LoadContext, config: EngineConfig, rank_class: Any, path: str, problems: list[Problem]
) -> Callable[[], Any] | None:
    """``engine.eviction_policy`` (``NAME`` or ``{type: NAME, ...options}``) as a factory of
    one policy per cache, after building one: a constructor that fails, or a backend that
    cannot drive the policy, is a problem at ``path`` naming the policy's plugin."""
    spec = config.eviction_policy
    options: dict[str, Any] = {}
    name_path = path
    if isinstance(spec, Mapping):
        options = dict(spec)
        name_path = f"{path}.type"
        if "type" not in options:
            problems.append((name_path, "required key missing"))
            return None
        spec = options.pop("type")
    cls = _lookup(ctx, "eviction_policy", spec, name_path, problems)
    if cls is None:
        return None
    found: list[Problem] = []
    policy_config = _options(ctx, cls, options, path, f"eviction policy {spec!r}", found)
    problems.extend(found)
    if found or rank_class is None:
        return None
    origin = f" ({ctx.plugins.label('eviction_policy', spec)})"
    factory = policy_factory(cls, policy_config)
    try:
        policy = factory()
    except Exception as exc:  # noqa: BLE001 - a plugin's constructor may raise anything
        problems.append((path, f"eviction policy {spec!r} failed to build: {exc!r}{origin}"))
        return None
    refusal = eviction_refusal(rank_class, policy)
    if refusal:
        problems.append((path, f"backend {config.backend!r} {refusal}{origin}"))
        return None
    return factory


def _explain_unknown(problems: list[Problem], rest: Mapping[str, Any], path: str, ctx: LoadContext) -> None:
    """An unknown key holding a mapping was most likely meant as a backend's section."""
    installed = ", ".join(ctx.plugins.backends().names()) or "(none)"
    for i, (p, msg) in enumerate(problems):
        key = p[len(path) + 1 :] if p.startswith(path + ".") else ""
        if msg.startswith("unknown key") and key in rest and isinstance(rest[key], Mapping):
            problems[i] = (
                p,
                (
                    f"unknown key: neither an engine argument nor the section of an installed backend "
                    f"(installed backends: {installed}; see 'servesim plugins')"
                ),
            )


def _resolve(ctx: LoadContext, raw: Any, path: str) -> tuple[EngineResolution | None, list[Problem]]:
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        return None, [(path, f"expected a mapping, got {show(raw)}")]
    backends = ctx.plugins.backends()
    rest = {k: v for k, v in raw.items() if k not in backends}
    sections = {k: v for k, v in raw.items() if k in backends}
    auto_blocks = rest.get("num_gpu_blocks") == AUTO
    if auto_blocks:  # sized by the timing model once it and the block size are known
        del rest["num_gpu_blocks"]
    config, problems = structure_at(ctx.conv, rest, EngineConfig, path)
    if config is None:
        _explain_unknown(problems, rest, path, ctx)
        return None, problems
    problems += check_engine(config, path)
    backend_configs = {
        name: _options(ctx, backends.get(name), data, f"{path}.{name}", f"backend {name!r}", problems)
        for name, data in sorted(sections.items())
    }
    rank_class = _lookup(ctx, "backend", config.backend, f"{path}.backend", problems)
    timing = dict(config.timing_model)
    timing_type = timing.pop("type", DEFAULT_TIMING_MODEL)
    tm_path = f"{path}.timing_model"
    timing_class = _lookup(ctx, "timing_model", timing_type, f"{tm_path}.type", problems)
    timing_config = None
    if timing_class is not None:
        what = f"timing model {timing_type!r}"
        timing_config = _options(ctx, timing_class, timing, tm_path, what, problems)
    eviction = _eviction_factory(ctx, config, rank_class, f"{path}.eviction_policy", problems)
    if problems:
        return None, problems
    backend_config = backend_configs.get(config.backend)
    if backend_config is None and rank_class.config_class is not None:
        backend_config = rank_class.config_class()
    resolved = resolve_block_size(config, rank_class.default_block_size_for(backend_config))
    if auto_blocks:
        resolved = _auto_blocks(resolved, timing_class, timing_config, timing_type, path, problems)
    problems += engine_needs(resolved, rank_class, ctx.plugins, path)
    for key, msg in rank_class.validate_config(resolved, backend_config):
        problems.append((path + key[len("engine") :] if key.startswith("engine") else key, msg))
    if problems:
        return None, problems
    return EngineResolution(
        resolved, rank_class, backend_config, timing_type, timing_class, timing_config, eviction
    ), []


def _auto_blocks(
    config: EngineConfig, timing_class: Any, timing_config: Any, timing_type: str, path: str,
    problems: list[Problem],
) -> EngineConfig:
    """``num_gpu_blocks: auto``: the pool the timing model's GPU memory holds."""
    key = f"{path}.num_gpu_blocks"
    try:
        blocks = timing_class.auto_num_gpu_blocks(timing_config, config)
    except (ValueError, OSError) as exc:
        problems.append((key, f"cannot size the KV pool automatically: {exc}"))
        return config
    if blocks is None:
        problems.append((key, f"'auto' needs a timing model that knows the GPU (such as 'aic'); "
                              f"timing model {timing_type!r} does not"))
        return config
    return attrs.evolve(config, num_gpu_blocks=int(blocks))


def resolve_engine(ctx: LoadContext, raw: Any, path: str = "engine") -> EngineResolution:
    """Validate one engine section; raises one ConfigError listing every problem."""
    engine, problems = _resolve(ctx, raw, path)
    if engine is None:
        raise ctx.fail(problems)
    return engine


def _check_plugins(
    ctx: LoadContext, cluster: Any, workload: Any, sinks: Any
) -> tuple[Any, dict[str, list[Any]], list[Problem]]:
    """Router, trace format and sink names exist; their options fit their config classes."""
    problems: list[Problem] = []
    router = _lookup(ctx, "router", cluster.router, "cluster.router", problems)
    router_config = None
    if router is not None and cluster.router_config:
        router_config = _options(
            ctx,
            router,
            cluster.router_config,
            "cluster.router_config",
            f"router {cluster.router!r}",
            problems,
        )
    trace = getattr(workload, "trace", None)
    if trace is not None:
        _lookup(ctx, "trace_format", trace.format, "workload.trace.format", problems)
    admission = getattr(workload, "admission", None)
    if admission is not None:
        policy = _lookup(ctx, "admission_policy", admission.get("type"), "workload.admission.type", problems)
        problems += admission_problems(policy, admission, workload.classes)
    specs: dict[str, list[Any]] = {}
    for attr, kind in SINK_LISTS:
        specs[attr] = []
        for i, entry in enumerate(getattr(sinks, attr, ())):
            spec = structure_spec(ctx, kind, entry, f"sinks.{attr}[{i}]", problems)
            if spec is not None:
                specs[attr].append(spec)
    return router_config, specs, problems


def structure_spec(
    ctx: LoadContext, kind: str, entry: Any, path: str, problems: list[Problem]
) -> tuple[str, Any, Any] | None:
    """``{type: NAME, ...options}`` at ``path`` → ``(NAME, registered class, structured
    options)``, or None with the problems added (a sink spec, top-level or nested)."""
    if not isinstance(entry, Mapping):
        problems.append((path, f"expected a mapping with a 'type' key, got {show(entry)}"))
        return None
    options = dict(entry)
    if "type" not in options:
        problems.append((f"{path}.type", "required key missing"))
        return None
    name = options.pop("type")
    cls = _lookup(ctx, kind, name, f"{path}.type", problems)
    if cls is None:
        return None
    cfg = _options(ctx, cls, options, path, f"{kind.replace('_', ' ')} {name!r}", problems)
    return name, cls, cfg


@attrs.frozen
class PlannerSpec:
    """A validated ``planner:`` section: the planner ``name``, its registered class, its
    structured options and its tick interval."""

    name: str
    cls: Any
    config: Any
    interval_s: float


def check_planner(ctx: LoadContext, raw: Any, problems: list[Problem]) -> PlannerSpec | None:
    """``planner: {type: NAME, interval_s: S, ...options}`` (None when absent)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(("planner", f"expected a mapping with a 'type' key, got {show(raw)}"))
        return None
    options = dict(raw)
    interval = options.pop("interval_s", 10.0)
    if not (isinstance(interval, (int, float)) and not isinstance(interval, bool)
            and 0 < interval < float("inf")):
        problems.append(("planner.interval_s", f"expected a finite number > 0, got {show(interval)}"))
        interval = 10.0
    spec = structure_spec(ctx, "planner", options, "planner", problems)
    if spec is None:
        return None
    return PlannerSpec(spec[0], spec[1], spec[2], float(interval))


def _check_worker_type(engine: EngineResolution | None, cluster: Any) -> list[Problem]:
    """A prefill-only or decode-only engine makes sense only in a prefill/decode split (which
    sets each role's type itself); aggregated workers of that type would silently skip decode
    time or prefill work and report meaningless latencies."""
    if engine is None or cluster.prefill_workers or cluster.decode_workers:
        return []
    kind = engine.config.worker_type
    if kind is WorkerType.AGGREGATED:
        return []
    return [
        (
            "engine.worker_type",
            f"expected 'aggregated' without a prefill/decode split, got {kind.value!r} "
            "(set cluster.prefill_workers and cluster.decode_workers for a split)",
        )
    ]


def _check_handoff(ctx: LoadContext, engine: EngineResolution | None, cluster: Any) -> list[Problem]:
    """A prefill/decode split needs a backend that declares ``servesim.rank.Handoff``."""
    if engine is None:
        return []
    return split_needs(cluster, engine.config, engine.rank_class, ctx.plugins)


def _check_pools(
    ctx: LoadContext, engine: EngineResolution, engine_section: Mapping[str, Any], cluster: Any
) -> list[Problem]:
    """Each pool's engine resolves; names are unique; every pool shares the router's slot
    layout (``dp_size``) and hash granularity (``block_size``) with ``engine:``. Like
    ``engine:``'s, a pool's timing model is built by ``servesim validate`` and by the run."""
    problems: list[Problem] = []
    if not cluster.pools:
        return problems
    if cluster.prefill_workers or cluster.decode_workers:
        problems.append(("cluster.pools", "pools and a prefill/decode split cannot be combined"))
    seen: set[str] = set()
    for i, pool in enumerate(cluster.pools):
        path = f"cluster.pools[{i}]"
        if not pool.name or pool.name in seen:
            problems.append((f"{path}.name", f"expected a unique non-empty name, got {show(pool.name)}"))
        seen.add(pool.name)
        if pool.workers < 1:
            problems.append((f"{path}.workers", f"expected an integer >= 1, got {pool.workers}"))
        resolved, found = _resolve(ctx, merge_engine(engine_section, pool.engine), f"{path}.engine")
        problems += found
        if resolved is None:
            continue
        for key in ("dp_size", "block_size", "worker_type"):
            mine, base = getattr(resolved.config, key), getattr(engine.config, key)
            if mine != base:
                problems.append((f"{path}.engine.{key}", f"every pool must have engine.{key} "
                                 f"{show(getattr(base, 'value', base))} (one router over all pools), "
                                 f"got {show(getattr(mine, 'value', mine))}"))
    return problems


def build_engine_timing(engine: EngineResolution, path: str, source: str | None) -> TimingModel:
    """The timing model of the engine at ``path`` (``engine`` or an override such as
    ``cluster.pools[1].engine``), its errors named under that path."""
    if path == "engine":
        return _build_timing(engine, "engine.timing_model", source)
    try:
        return _build_timing(engine, f"{path}.timing_model", source)
    except ConfigError as exc:
        key = exc.path or f"{path}.timing_model"
        if not key.startswith("engine."):
            raise
        # A model names its own keys from engine: (interpolated's profile); this is the pool's.
        text = str(exc)
        for part in (exc.source, exc.path):
            if part and text.startswith(f"{part}: "):
                text = text[len(part) + 2 :]
        raise ConfigError(text, path=f"{path}{key[len('engine') :]}", source=exc.source) from None


def _structure_sections(
    ctx: LoadContext, raw: Mapping[str, Any], extra: Mapping[str, type]
) -> tuple[dict[str, Any], list[Problem]]:
    problems: list[Problem] = []
    known = sorted([*SECTIONS, *ELASTIC, "planner", *extra])
    for key in raw:
        if key not in known:
            problems.append((str(key), unknown_key_message(str(key), known)))
    out: dict[str, Any] = {}
    for name in ELASTIC:  # optional: structured only when present
        if raw.get(name) is not None:
            from servesim.config.elastic import ELASTIC_SECTIONS

            value, found = structure_at(ctx.conv, raw[name], ELASTIC_SECTIONS[name], name)
            out[name] = value
            problems += found
    out["planner"] = raw.get("planner")
    classes = {
        "cluster": ClusterConfig,
        "workload": WorkloadConfig,
        "report": ReportConfig,
        "sinks": SinksConfig,
        **extra,
    }
    for name, cls in classes.items():
        data = raw.get(name)
        value, found = structure_at(ctx.conv, {} if data is None else data, cls, name)
        out[name] = value
        problems += found
    return out, problems


def build(raw: Any, ctx: LoadContext, extra_sections: Mapping[str, type] | None = None) -> LoadedConfig:
    """Validate raw YAML data (after ``--set``) into a :class:`LoadedConfig`.

    ``extra_sections``: further top-level sections a command owns (``serve:`` for a plugin's
    ``servesim serve``), name → attrs class, structured by the same converter; they end up
    in :attr:`LoadedConfig.extra`."""
    if not isinstance(raw, Mapping):
        raise ctx.fail([("", f"expected a mapping of sections ({', '.join(SECTIONS)}), got {show(raw)}")])
    extra_sections = dict(extra_sections or {})
    sections, section_problems = _structure_sections(ctx, raw, extra_sections)
    engine_raw = raw.get("engine")
    engine, problems = _resolve(ctx, engine_raw, "engine")
    problems += section_problems
    if any(sections[k] is None for k in sections if k not in (*ELASTIC, "planner")) \
            or any(sections.get(k) is None for k in ELASTIC if raw.get(k) is not None):
        raise ctx.fail(problems)
    if any(sections.get(k) is not None for k in ELASTIC):
        from servesim.config.elastic import check_elastic

        problems += check_elastic(sections.get("lifecycle"), sections.get("faults"))
    planner_spec = check_planner(ctx, sections["planner"], problems)
    problems += check_sections(sections["cluster"], sections["workload"], sections["report"])
    router_config, sink_specs, found = _check_plugins(
        ctx, sections["cluster"], sections["workload"], sections["sinks"]
    )
    problems += found
    problems += _check_worker_type(engine, sections["cluster"])
    engine_section = dict(engine_raw) if isinstance(engine_raw, Mapping) else {}
    for role in ("prefill_engine", "decode_engine"):
        overrides = getattr(sections["cluster"], role, None)
        if overrides and engine is not None:
            problems += _resolve(ctx, merge_engine(engine_section, overrides), f"cluster.{role}")[1]
    if engine is not None:
        problems += _check_pools(ctx, engine, engine_section, sections["cluster"])
    problems += _check_handoff(ctx, engine, sections["cluster"])
    if engine is not None:
        problems += workload_needs(sections["workload"], engine.config, engine.rank_class, ctx.plugins)
    if problems or engine is None:
        raise ctx.fail(problems)
    extra = {name: sections.pop(name) for name in extra_sections}
    sim = SimConfig(engine=engine.config, **sections)
    loaded = LoadedConfig(sim, engine, engine_section, ctx, router_config, sink_specs)
    loaded.extra = extra
    loaded.planner_spec = planner_spec
    return loaded


class LoadedConfig:
    """A validated configuration and the plugins it selected.

    ``sim`` holds the typed sections (``sim.engine.block_size`` is resolved to the backend's
    default); ``rank_class``/``backend_config`` are the selected backend and its structured
    ``engine.<backend>:`` section.
    """

    def __init__(
        self,
        sim: SimConfig,
        engine: EngineResolution,
        engine_section: dict[str, Any],
        ctx: LoadContext,
        router_config: Any = None,
        sink_specs: dict[str, list[Any]] | None = None,
    ) -> None:
        self.sim = sim
        self.engine = engine
        self.source = ctx.source
        self.plugins = ctx.plugins
        self.router_config = router_config
        self.sink_specs = sink_specs or {}
        self._engine_section = engine_section
        self.context = ctx
        self._timing: TimingModel | None = None
        self.extra: dict[str, Any] = {}  # sections a command owns (build's extra_sections)
        self.planner_spec: PlannerSpec | None = None  # ``planner:``, validated (check_planner)

    @property
    def rank_class(self) -> type:
        return self.engine.rank_class

    @property
    def backend_config(self) -> Any:
        return self.engine.backend_config

    @property
    def eviction_factory(self) -> Callable[[], Any]:
        """Zero-argument callable building one eviction policy (one per KV pool)."""
        return self.engine.eviction_class

    def timing_model(self) -> TimingModel:
        """The timing model instance (built once; every engine factory shares it)."""
        if self._timing is None:
            self._timing = _build_timing(self.engine, "engine.timing_model", self.source)
        return self._timing

    def engine_factory(
        self,
        overrides: Mapping[str, Any] | None = None,
        *,
        emit_kv_events: bool = False,
        emit_forward_pass_metrics: bool = True,
        path: str = "engine overrides",
    ) -> EngineFactory:
        """An :class:`EngineFactory` for ``engine:`` with ``overrides`` (a raw engine-section
        mapping, e.g. ``cluster.prefill_engine``) merged over it and validated the same way;
        problems are reported under ``path`` (e.g. ``cluster.prefill_engine``)."""
        engine = self.engine
        timing: TimingModel | None = None
        if overrides:
            engine = self.resolve_overrides(overrides, path)
            # One instance serves every engine (aisimulate-engine.md §6.5) unless the model
            # prices by its engine section too (it overrides TimingModel.for_engine).
            by_engine = timing_overrides(engine.timing_class, "for_engine")
            if (engine.timing_type, engine.timing_config, engine.config if by_engine else None) != (
                self.engine.timing_type,
                self.engine.timing_config,
                self.engine.config if by_engine else None,
            ):
                timing = build_engine_timing(engine, path, self.source)
        factory = EngineFactory(
            engine.config,
            engine.rank_class,
            timing or self.timing_model(),
            backend_config=engine.backend_config,
            make_eviction_policy=engine.eviction_class,
            emit_kv_events=emit_kv_events,
            emit_forward_pass_metrics=emit_forward_pass_metrics,
        )
        key = f"{path}.backend" if overrides else "engine.backend"
        factory.name_failure = engine_failure(self.plugins, self.source, engine.config.backend, key)
        return factory

    def resolve_overrides(self, overrides: Mapping[str, Any], path: str) -> EngineResolution:
        """``engine:`` with ``overrides`` merged over it, validated (problems under ``path``)."""
        return resolve_engine(self.context, merge_engine(self._engine_section, overrides), path)

    def resolved(self) -> dict[str, Any]:
        """The full resolved configuration as plain JSON-able data (for reports).

        Loading it back (as YAML) gives the same configuration.
        """
        conv = self.context.conv
        engine = echo_section(self.engine.config, conv)
        if not engine.get("enable_lora"):
            for key in LORA_ENGINE_KEYS:  # a configuration without LoRA reads as it always did
                engine.pop(key, None)
        timing = conv.unstructure(self.engine.timing_config) if self.engine.timing_config is not None else {}
        timing = {k: v for k, v in timing.items() if v is not None}  # unset options: defaults
        engine["timing_model"] = {"type": self.engine.timing_type, **timing}
        if self.engine.backend_config is not None:
            engine[self.sim.engine.backend] = echo_section(self.engine.backend_config, conv)
        out = {"engine": engine}
        for name in SECTIONS[1:]:
            out[name] = conv.unstructure(getattr(self.sim, name))
        synthetic = out["workload"].get("synthetic")
        if synthetic is not None and not synthetic.get("lora_adapters"):
            for key in ("lora_adapters", "lora_popularity", "lora_fraction"):
                synthetic.pop(key, None)  # a workload without adapters reads as it always did
        if not out["cluster"].get("pools"):
            out["cluster"].pop("pools", None)  # a homogeneous cluster reads as it always did
        drop_unset_scope(out["workload"])  # so does a workload without warmup, stop, classes
        for name in (*ELASTIC, "planner"):  # optional sections, only when set
            value = getattr(self.sim, name)
            if value is not None:
                out[name] = echo_section(value, conv)
        for name, value in self.extra.items():
            out[name] = conv.unstructure(value)
        return _jsonable(out)


def echo_section(config: Any, conv: Any) -> dict[str, Any]:
    """An engine or backend section as the report echoes it: every option, less those the
    config class names in ``report_omits_defaults`` while they hold their default (options
    added after reports were first written: a configuration that does not set them reads as
    before)."""
    out: dict[str, Any] = conv.unstructure(config)
    omits = getattr(type(config), "report_omits_defaults", ())
    if omits and attrs.has(type(config)):
        for f in attrs.fields(type(config)):
            if f.name in omits and out.get(f.name, None) == conv.unstructure(f.default):
                out.pop(f.name, None)
    return out


def _build_timing(engine: EngineResolution, path: str, source: str | None) -> TimingModel:
    try:
        return engine.timing_class.for_engine(engine.timing_config, engine.config)
    except ConfigError as exc:
        if exc.source is not None or source is None:
            raise
        # A timing model knows the key path but not which file the options came from.
        message = str(exc)
        if exc.path and message.startswith(f"{exc.path}: "):
            message = message[len(exc.path) + 2 :]
        raise ConfigError(message, path=exc.path, source=source) from None
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"timing model {engine.timing_type!r} rejected its options: {exc}", path=path, source=source
        ) from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def expand_trace_shorthand(raw: dict[str, Any]) -> None:
    """``workload.trace: PATH`` means ``workload.trace: {path: PATH}`` (what a new user
    writes first). Applied before and after ``--set``, so ``--set workload.trace.path=...``
    extends a shorthand and ``--set workload.trace=PATH`` is one."""
    workload = raw.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("trace"), str):
        workload["trace"] = {"path": workload["trace"]}


def load_config(
    path: str | Sequence[str] | None,
    sets: list[str] | tuple[str, ...] = (),
    plugins: Plugins | None = None,
    extra_sections: Mapping[str, type] | None = None,
) -> LoadedConfig:
    """Load and validate a YAML config (``path`` None or empty: built-in defaults; several
    paths: merged in order, later keys winning) with ``--set`` overrides (``a.b=value``,
    values parsed as YAML) applied to the raw data first.
    ``extra_sections``: top-level sections the calling command owns (see :func:`build`)."""
    paths = [path] if isinstance(path, str) else list(path or ())
    raw, file_origins = merge_files(paths) if paths else ({}, {})
    path = paths[0] if len(paths) == 1 else (" + ".join(paths) if paths else None)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"expected a mapping of sections ({', '.join(SECTIONS)}), got {show(raw)}", source=path
        )
    expand_trace_shorthand(raw)
    origins = {**file_origins, **apply_sets(raw, sets)}
    expand_trace_shorthand(raw)
    ctx = LoadContext(LazyConverter(), plugins if plugins is not None else Plugins(), path, origins)
    return build(raw, ctx, extra_sections)


def default_config(plugins: Plugins | None = None) -> LoadedConfig:
    """The built-in defaults, with no file and no overrides."""
    return load_config(None, (), plugins)


__all__ = ["EngineResolution", "LoadedConfig", "default_config", "load_config", "merge_engine"]
