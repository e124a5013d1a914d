"""Building a run's sinks from their validated specs, nested specs included.

:class:`SinkBuilder` is the :class:`servesim.sinks.base.SinkContext` a sink's ``from_config`` gets:
a composing sink (``tee``, ``filter``, ``sample``, or a plugin's own) builds the sinks it wraps
through it, from the same registries and with the same converter as the top-level
``sinks:`` lists, and every problem in a nested spec is one
:class:`~servesim.errors.ConfigError` naming the full key path
(``sinks.kv_events[0].sinks[1].path``). A sink constructor that raises is reported as
``KEY.PATH: message (plugin NAME from DIST)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servesim.config.converter import Problem, show
from servesim.errors import ConfigError, UserError
from servesim.sinks.base import build_sink

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig, LoadContext


class SinkBuilder:
    """Builds sinks of one kind at one key path (see the module docs)."""

    def __init__(self, ctx: LoadContext, kind: str, path: str, *, validating: bool = False) -> None:
        self.ctx = ctx
        self.kind = kind
        self.path = path
        self.source = ctx.source
        self.validating = validating

    @property
    def plugins(self) -> Any:
        """The run's :class:`~servesim.plugins.Plugins` (its registries)."""
        return self.ctx.plugins

    def _at(self, key: str) -> str:
        if not key:
            return self.path
        return f"{self.path}{key}" if key.startswith("[") else f"{self.path}.{key}"

    def build(self, spec: Any, key: str) -> Any:
        from servesim.config.loader import structure_spec

        path = self._at(key)
        problems: list[Problem] = []
        found = structure_spec(self.ctx, self.kind, spec, path, problems)
        if problems or found is None:
            raise self.ctx.fail(problems)
        name, cls, cfg = found
        return self.construct(name, cls, cfg, path)

    def build_all(self, specs: Any, key: str) -> list[Any]:
        path = self._at(key)
        if isinstance(specs, (str, bytes)) or not isinstance(specs, Sequence):
            raise self.ctx.fail([(path, f"expected a list of sink specs, got {show(specs)}")])
        return [self.build(spec, f"{key}[{i}]") for i, spec in enumerate(specs)]

    def construct(self, name: str, cls: type, cfg: Any, path: str) -> Any:
        """``cls.from_config(cfg, context)`` with a context at ``path``; failures name the
        key path and the plugin that registered ``name``."""
        child = SinkBuilder(self.ctx, self.kind, path, validating=self.validating)
        try:
            return build_sink(cls, cfg, child)
        except ConfigError:
            raise
        except UserError as exc:  # e.g. a file it cannot create: the message says so
            raise self._failure(str(exc), name, path) from exc
        except Exception as exc:  # third-party constructor code
            what = self.kind.replace("_", " ")
            message = f"{what} {name!r} failed to start: {type(exc).__name__}: {exc}"
            raise self._failure(message, name, path) from exc

    def _failure(self, message: str, name: str, path: str) -> ConfigError:
        label = self.plugins.label(self.kind, name)
        return ConfigError(f"{message} ({label})", path=path, source=self.source)


def build_sinks(loaded: LoadedConfig, *, validating: bool = False) -> dict[str, list[Any]]:
    """Every configured sink, by list (``kv_events``, ``fpm``), in config order.

    On a failure the sinks already built are closed before the error propagates.
    """
    from servesim.config.loader import SINK_LISTS

    built: dict[str, list[Any]] = {attr: [] for attr, _kind in SINK_LISTS}
    try:
        for attr, kind in SINK_LISTS:
            for i, (name, cls, cfg) in enumerate(loaded.sink_specs.get(attr, [])):
                path = f"sinks.{attr}[{i}]"
                builder = SinkBuilder(loaded.context, kind, path, validating=validating)
                built[attr].append(builder.construct(name, cls, cfg, path))
    except BaseException:
        for sinks in built.values():
            for sink in sinks:
                # The construction error is the one to report; a close failure on the way
                # out must not replace it.
                with contextlib.suppress(Exception):
                    sink.close()
        raise
    return built


__all__ = ["SinkBuilder", "build_sinks"]
