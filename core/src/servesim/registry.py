"""Named registries that plugins fill through ``servesim_register_*`` hooks.

Plugins never touch globals: the plugin manager hands each hook a :class:`Registry` and the
registry owns collection, duplicate detection and lookup (style-anchors.md rule 4, after
tox's ``ToxEnvRegister`` and hatch's ``ClassRegister``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import attrs
from attrs import frozen

from servesim.errors import PluginError


@frozen
class Entry:
    """One registered implementation: its name, the object, and who registered it."""

    name: str
    obj: Any
    plugin: str
    distribution: str


@frozen
class _Lazy:
    """An object registered by its import path, ``"module:attribute"``, loaded on first use."""

    target: str


class Registry:
    """Implementations of one kind (``backend``, ``timing_model``, ...), keyed by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._current: tuple[str, str] = ("<direct>", "<direct>")

    def set_source(self, plugin: str, distribution: str) -> None:
        self._current = (plugin, distribution)

    def add(self, name: str, obj: Any) -> None:
        """Register ``obj`` under ``name``. Two registrations of one name are an error that
        names both distributions."""
        if not isinstance(name, str) or not name:
            raise PluginError(f"{self.kind} names must be non-empty strings, got {name!r}")
        plugin, dist = self._current
        if name in self._entries:
            prev = self._entries[name]
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by plugin {prev.plugin!r} "
                f"(distribution {prev.distribution}) and by plugin {plugin!r} (distribution {dist})"
            )
        self._entries[name] = Entry(name, obj, plugin, dist)

    def add_lazy(self, name: str, target: str) -> None:
        """Register the object at ``target`` (``"module:attribute"``) under ``name`` without
        importing it: the module loads when :meth:`get` first asks for ``name``, so a run
        imports only the implementations it selects."""
        module, sep, attribute = target.partition(":")
        if not (module and sep and attribute):
            raise PluginError(f"{self.kind} {name!r}: lazy target must be 'module:attribute', "
                              f"got {target!r}")
        self.add(name, _Lazy(target))

    def get(self, name: str) -> Any:
        """The object registered as ``name``; unknown names list what exists."""
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "(none)"
            raise PluginError(
                f"unknown {self.kind} {name!r}; installed: {known} (see 'servesim plugins')"
            ) from None
        if isinstance(entry.obj, _Lazy):
            entry = self._entries[name] = attrs.evolve(entry, obj=self._load(entry))
        return entry.obj

    def _load(self, entry: Entry) -> Any:
        target = entry.obj.target
        module, _, attribute = target.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attribute.split("."):
                obj = getattr(obj, part)
        except Exception as exc:  # any import-time failure of third-party code
            raise PluginError(
                f"plugin {entry.plugin!r} (distribution {entry.distribution}) failed to load "
                f"{self.kind} {entry.name!r} from {target}: {type(exc).__name__}: {exc}"
            ) from exc
        return obj

    def entry(self, name: str) -> Entry:
        self.get(name)
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        for name in self._entries:
            self.get(name)  # whoever walks every entry sees loaded objects
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)
