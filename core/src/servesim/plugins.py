"""Plugin discovery and the typed facade core code uses instead of ``pm.hook``.

:func:`make_plugin_manager` builds a fresh pluggy manager (no import-time side effects,
style-anchors.md rule 6, after tox's ``Plugin.load_plugins`` and pytest's
``PytestPluginManager``):

1. add :mod:`servesim.hookspecs`;
2. block the names in ``SERVESIM_DISABLE_PLUGINS=a,b`` (like pytest's ``-p no:name``);
3. register every module of the :mod:`servesim.builtins` package, sorted by name, as plugin
   ``servesim.builtins.<module>`` — core's defaults go through the same hooks as anyone's;
4. unless ``SERVESIM_DISABLE_PLUGIN_AUTOLOAD`` is set, load the entry points of group
   ``servesim`` (the entry-point name is the plugin name);
5. :meth:`ServesimPluginManager.check_hooks` (pluggy's ``check_pending``), so a misspelt hook
   implementation is an error with a "did you mean", not silently ignored.

:class:`Plugins` wraps the manager: :meth:`Plugins.registries` calls each ``servesim_register_*``
hook one plugin at a time so every registration knows which distribution made it (a duplicate
name then names both distributions), and caches the result.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Iterator
from types import ModuleType

import pluggy
from attrs import frozen

from servesim import hookspecs, plugin_scan
from servesim._markers import PROJECT
from servesim.errors import PluginError
from servesim.hookspecs import HOOK_KINDS
from servesim.registry import Registry

ENTRY_POINT_GROUP = "servesim"
BUILTIN_PREFIX = "servesim.builtins."
DISABLE_ENV = "SERVESIM_DISABLE_PLUGINS"
DISABLE_AUTOLOAD_ENV = "SERVESIM_DISABLE_PLUGIN_AUTOLOAD"
TRACE_ENV = "SERVESIM_TRACE_PLUGINS"
DIRECT = "<direct>"
"""Distribution reported for plugins registered by hand (``pm.register(obj, name)``)."""


@frozen
class DistInfo:
    """The distribution a plugin came from."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


class ServesimPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers each plugin's distribution and turns plugin failures
    into :class:`PluginError` naming the entry point and its distribution."""

    def __init__(self, *, tolerant: bool = False) -> None:
        super().__init__(PROJECT)
        self.distributions: dict[str, DistInfo] = {}
        #: With ``tolerant``, a plugin that fails to load or to validate is left out and its
        #: one-line error kept here by name (``servesim plugins`` lists them); otherwise the
        #: first such failure raises :class:`PluginError`.
        self.tolerant = tolerant
        self.broken: dict[str, str] = {}

    def load_setuptools_entrypoints(self, group: str, name: str | None = None) -> int:
        """Load the entry points of ``group`` like pluggy does, with servesim's errors.

        Two *different* distributions exporting the same entry-point name is an error (pluggy
        would silently keep the first); the same distribution seen twice on ``sys.path`` is not.
        """
        return self.load_records(plugin_scan.entry_points(group)[0], name)

    def load_records(self, records: list[plugin_scan.Record], name: str | None) -> int:
        count = 0
        seen: dict[str, DistInfo] = {}
        for ep_name, ep_value, dist_name, dist_version in records:
            if name is not None and ep_name != name:
                continue
            if self.is_blocked(ep_name):
                continue
            info = DistInfo(dist_name, dist_version)
            prev = seen.get(ep_name) or self.distributions.get(ep_name)
            if prev is not None and prev.name != info.name:
                raise PluginError(
                    f"plugin name {ep_name!r} is claimed by two distributions: {prev} and {info}"
                )
            if self.has_plugin(ep_name):
                continue
            seen[ep_name] = info
            try:
                plugin = _load_entry_point(ep_name, ep_value, info)
                self.register_checked(plugin, ep_name, f"entry point {ep_name!r} of {info}")
            except PluginError as exc:
                if not self.tolerant:
                    raise
                self.broken[ep_name] = f"{exc}; {skip_hint(ep_name)}"
                continue
            self.distributions[ep_name] = info
            count += 1
        return count

    def check_hooks(self) -> None:
        """Every hook implementation must match a hookspec (pluggy's ``check_pending``): a
        misspelt hook is an error naming the plugin, the hook, the nearest real hook and how
        to skip the plugin, not a hook silently never called."""
        for hook_name, plugin in unknown_hooks(self):
            name = self.get_name(plugin)
            if name is None:  # left out already, for an earlier unknown hook of its own
                continue
            message = (f"plugin {name!r} ({self.distribution_of(name)}) implements an unknown "
                       f"hook {hook_name!r}{did_you_mean(hook_name)}; {skip_hint(name)}")
            if not self.tolerant:
                raise PluginError(message)
            self.broken[name] = message
            self.unregister(plugin)

    def register_checked(self, plugin: object, name: str, what: str) -> None:
        try:
            self.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {what} is invalid: {_one_line(exc)}") from None
        except ValueError as exc:  # pluggy: the same object under two names
            raise PluginError(f"plugin {what} cannot be registered: {_one_line(exc)}") from None

    def distribution_of(self, plugin_name: str) -> DistInfo:
        """Where ``plugin_name`` came from (``<direct>`` for hand-registered plugins)."""
        return self.distributions.get(plugin_name, DistInfo(DIRECT, ""))


def _one_line(exc: BaseException) -> str:
    """pluggy's validation messages span lines; the CLI prints errors as one line."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def unknown_hooks(pm: pluggy.PluginManager) -> list[tuple[str, object]]:
    """``(hook name, plugin)`` of every implementation of a hook no hookspec declares."""
    out = []
    for name in sorted(pm.hook.__dict__):
        if name.startswith("_"):
            continue
        caller = getattr(pm.hook, name)
        if not caller.has_spec():
            out += [(name, impl.plugin) for impl in caller.get_hookimpls() if not impl.optionalhook]
    return out


def did_you_mean(hook_name: str) -> str:
    """`` (did you mean 'servesim_…'?)`` for the nearest declared hook, or nothing."""
    import difflib

    declared = [n for n in dir(hookspecs) if n.startswith("servesim_")]
    near = difflib.get_close_matches(hook_name, declared, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def skip_hint(plugin_name: str) -> str:
    """How to run without a broken plugin."""
    return f"set {DISABLE_ENV}={plugin_name} to run without it"


def _load_entry_point(name: str, value: str, info: DistInfo) -> object:
    try:
        return plugin_scan.load(value)
    except Exception as exc:  # any import-time failure of third-party code
        raise PluginError(
            f"plugin {name!r} (entry point {value!r} of distribution {info}) failed to "
            f"load: {type(exc).__name__}: {exc}"
        ) from exc


def _split_names(value: str | None) -> list[str]:
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def disabled_hint() -> str:
    """Which plugin-blocking environment variables are set (empty when none): an unknown
    plugin name is often an installed plugin they keep out."""
    parts = []
    if os.environ.get(DISABLE_AUTOLOAD_ENV):
        parts.append(f"{DISABLE_AUTOLOAD_ENV} is set, so only built-ins are loaded")
    blocked = _split_names(os.environ.get(DISABLE_ENV))
    if blocked:
        parts.append(f"{DISABLE_ENV} blocks {', '.join(blocked)}")
    return "; ".join(parts)


def builtin_modules() -> Iterator[tuple[str, ModuleType]]:
    """``(plugin_name, module)`` for every module of :mod:`servesim.builtins`, by name."""
    import servesim.builtins as package

    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
    for mod in names:
        full = BUILTIN_PREFIX + mod
        yield full, importlib.import_module(full)


def servesim_version() -> str:
    """The installed ``servesim`` distribution's version (from the entry-point cache when it
    holds, :mod:`servesim.plugin_scan`)."""
    return plugin_scan.entry_points(ENTRY_POINT_GROUP)[1]


def make_plugin_manager(*, autoload: bool = True, tolerant: bool = False) -> ServesimPluginManager:
    """A fresh manager with hookspecs, built-ins and (unless disabled) installed plugins.

    :param autoload: load ``servesim`` entry points; tests pass False to register their own
        plugins on a clean manager. ``SERVESIM_DISABLE_PLUGIN_AUTOLOAD`` also turns it off.
    :param tolerant: leave out a plugin that fails to load or implements an unknown hook,
        keeping its error in ``pm.broken`` (``servesim plugins``), instead of raising.
    """
    pm = ServesimPluginManager(tolerant=tolerant)
    pm.add_hookspecs(hookspecs)
    for name in _split_names(os.environ.get(DISABLE_ENV)):
        pm.set_blocked(name)
    autoload = autoload and not os.environ.get(DISABLE_AUTOLOAD_ENV)
    # One look at the installed distributions serves both the entry points and the version.
    records, version = plugin_scan.entry_points(ENTRY_POINT_GROUP) if autoload else (
        [], servesim_version())
    builtin_dist = DistInfo("servesim", version)
    for name, module in builtin_modules():
        if pm.is_blocked(name):
            continue
        pm.register_checked(module, name, f"built-in {name!r}")
        pm.distributions[name] = builtin_dist
    if autoload:
        pm.load_records(records, None)
    pm.check_hooks()
    if os.environ.get(TRACE_ENV) not in (None, "", "0"):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()  # any pm.hook call; registration calls trace themselves (Plugins._fill)
    return pm


@frozen
class PluginInfo:
    """One registered plugin, for ``servesim plugins``."""

    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...]


_HOOK_OF_KIND = {kind: hook for hook, kind in HOOK_KINDS.items()}


class Plugins:
    """Typed facade over the plugin manager (style-anchors.md rule 7).

    Core code asks this object for registries; only this module touches ``pm.hook``.
    Built registries are cached, so repeated lookups do not call hooks again.
    """

    def __init__(self, pm: ServesimPluginManager | None = None, *, autoload: bool = True,
                 tolerant: bool = False) -> None:
        self._pm = pm
        self._autoload = autoload
        self._tolerant = tolerant
        # Filled one kind at a time, on first use: a run asks only for the kinds it needs.
        self._registries: dict[str, Registry] = {}
        self._all: dict[str, Registry] | None = None

    @property
    def pm(self) -> ServesimPluginManager:
        """The underlying manager, built on first use."""
        if self._pm is None:
            self._pm = make_plugin_manager(autoload=self._autoload, tolerant=self._tolerant)
        return self._pm

    def registries(self) -> dict[str, Registry]:
        """kind → :class:`Registry`, in :data:`servesim.hookspecs.HOOK_KINDS` order."""
        if self._all is None:
            self._all = {kind: self.registry(kind) for kind in HOOK_KINDS.values()}
        return self._all

    def label(self, kind: str, name: str) -> str:
        """``plugin NAME from DIST`` for the implementation registered as ``name``, as errors
        name the plugin behind a configured choice."""
        entry = self.registry(kind).entry(name)
        return f"plugin {entry.plugin} from {entry.distribution}"

    def registry(self, kind: str) -> Registry:
        """The registry of one kind (``backend``, ``timing_model``, ...)."""
        registry = self._registries.get(kind)
        if registry is None:
            hook_name = _HOOK_OF_KIND.get(kind)
            if hook_name is None:
                raise PluginError(
                    f"unknown plugin kind {kind!r}; kinds: {', '.join(HOOK_KINDS.values())}"
                )
            registry = Registry(kind)
            self._fill(hook_name, registry)
            self._registries[kind] = registry
        return registry

    # One typed accessor per hook, so call sites are checked (tox ``plugin/manager.py``).
    def backends(self) -> Registry:
        return self.registry("backend")

    def timing_models(self) -> Registry:
        return self.registry("timing_model")

    def eviction_policies(self) -> Registry:
        return self.registry("eviction_policy")

    def kv_event_sinks(self) -> Registry:
        return self.registry("kv_event_sink")

    def fpm_sinks(self) -> Registry:
        return self.registry("fpm_sink")

    def trace_formats(self) -> Registry:
        return self.registry("trace_format")

    def routers(self) -> Registry:
        return self.registry("router")

    def schedule_policies(self) -> Registry:
        return self.registry("schedule_policy")

    def admission_policies(self) -> Registry:
        return self.registry("admission_policy")

    def planners(self) -> Registry:
        return self.registry("planner")

    def ordered_impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        """Implementations of ``hook_name``: built-ins first, then the rest by plugin name, so
        registration order (and thus duplicate messages) never depends on ``sys.path``."""
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        return sorted(impls, key=lambda i: (not i.plugin_name.startswith(BUILTIN_PREFIX), i.plugin_name))

    def _fill(self, hook_name: str, registry: Registry) -> None:
        """Call each implementation on its own so the registry knows who registers what.

        The calls bypass pluggy's multi-call loop on purpose: pluggy's ``subset_hook_caller``
        needs hashable plugin objects, and registration hooks have no results to combine.
        They are traced like pluggy's own calls when ``SERVESIM_TRACE_PLUGINS`` is set.
        """
        pm = self.pm
        hooktrace = pm.trace.root.get("hook")
        for impl in self.ordered_impls(hook_name):
            name = impl.plugin_name
            if impl.hookwrapper or impl.wrapper:
                raise PluginError(f"plugin {name!r}: {hook_name} cannot be a hook wrapper")
            registry.set_source(name, str(pm.distribution_of(name)))
            hooktrace(hook_name, {"plugin": name, "registry": registry.kind})
            kwargs = {"registry": registry}
            try:
                impl.function(*(kwargs[arg] for arg in impl.argnames))
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"plugin {name!r} ({pm.distribution_of(name)}) failed in {hook_name}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

    def add_commands(self, subparsers: argparse._SubParsersAction) -> None:
        """Let every plugin add CLI subcommands (``servesim_add_commands``), one plugin at a
        time and in :meth:`ordered_impls` order, so a clash or a failure names the plugin and
        its distribution."""
        pm = self.pm
        for impl in self.ordered_impls("servesim_add_commands"):
            name = impl.plugin_name
            where = f"plugin {name!r} ({pm.distribution_of(name)})"
            before = set(subparsers.choices)
            kwargs = {"subparsers": subparsers}
            try:
                impl.function(*(kwargs[arg] for arg in impl.argnames))
            except argparse.ArgumentError as exc:  # a name another command already holds
                raise PluginError(f"{where} failed in servesim_add_commands: {exc}") from exc
            except PluginError:
                raise
            except Exception as exc:
                raise PluginError(
                    f"{where} failed in servesim_add_commands: {type(exc).__name__}: {exc}"
                ) from exc
            for cmd in set(subparsers.choices) - before:
                if subparsers.choices[cmd].get_default("servesim_command") is None:
                    raise PluginError(
                        f"{where} added command {cmd!r} without "
                        "set_defaults(servesim_command=func)"
                    )

    def culprit(self, exc: BaseException) -> tuple[str, BaseException] | None:
        """``(plugin NAME from DIST, the exception it raised)`` for the installed plugin whose
        code raised ``exc`` or an exception ``exc`` wraps (following ``__cause__`` and
        ``__context__``): the innermost traceback frame outside libraries is in that plugin's
        package. None when servesim's own code raised each of them (core's built-ins are
        servesim, not plugins)."""
        owners: dict[str, str] = {}
        for registry in self.registries().values():
            for entry in registry:
                package = (getattr(entry.obj, "__module__", None) or "").partition(".")[0]
                if package and package != PROJECT and package not in owners:
                    owners[package] = f"plugin {entry.plugin} from {entry.distribution}"
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            tb = current.__traceback__
            frames = []
            while tb is not None:
                frames.append(tb.tb_frame.f_globals.get("__name__", ""))
                tb = tb.tb_next
            # The raising frame decides, skipping library frames (json, numpy...): a plugin's
            # own code, or servesim's (a core check refusing a plugin's value is not the
            # plugin's crash).
            for module in reversed(frames):
                package = str(module).partition(".")[0]
                owner = owners.get(package)
                if owner is not None:
                    return owner, current
                if package == PROJECT:
                    break
            current = current.__cause__ or current.__context__
        return None

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution and implemented hooks, by name."""
        pm = self.pm
        out = []
        for name, plugin in pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            callers = pm.get_hookcallers(plugin) or []
            hooks = tuple(sorted(c.name for c in callers))
            info = pm.distribution_of(name)
            out.append(PluginInfo(name, info.name, info.version, hooks))
        return sorted(out, key=lambda p: p.name)


__all__ = [
    "DISABLE_AUTOLOAD_ENV",
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "TRACE_ENV",
    "DistInfo",
    "PluginInfo",
    "Plugins",
    "ServesimPluginManager",
    "builtin_modules",
    "make_plugin_manager",
]
