"""One way to name a plugin that fails while it is built: ``servesim validate`` builds every
configured plugin once, and ``servesim run`` builds the engines; both report a failure as
the same :class:`~servesim.errors.ConfigError` ``KEY.PATH: message (plugin NAME from DIST)``
(exit 2, no traceback)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from servesim.errors import ConfigError, UserError

if TYPE_CHECKING:
    from servesim.plugins import Plugins

T = TypeVar("T")


def _message(exc: ConfigError) -> str:
    """A ConfigError's message without its ``source: path:`` prefix."""
    text = str(exc)
    for prefix in (f"{exc.source}: " if exc.source else "", f"{exc.path}: " if exc.path else ""):
        if prefix and text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def build_failure(plugins: Plugins, source: str | None, kind: str, name: str, path: str,
                  exc: Exception) -> ConfigError:
    """``exc``, raised while building the ``kind`` plugin ``name`` configured at ``path``, as
    a config error naming the plugin and its distribution."""
    label = plugins.label(kind, name)
    if isinstance(exc, ConfigError):
        return ConfigError(f"{_message(exc)} ({label})", path=exc.path or path,
                           source=exc.source or source)
    if isinstance(exc, UserError):
        return ConfigError(f"{exc} ({label})", path=path, source=source)
    what = kind.replace("_", " ")
    return ConfigError(f"{what} {name!r} failed to start: {type(exc).__name__}: {exc} ({label})",
                       path=path, source=source)


def built(plugins: Plugins, source: str | None, kind: str, name: str, path: str,
          build: Callable[[], T]) -> T:
    """``build()``, with any failure named by :func:`build_failure`."""
    try:
        return build()
    except Exception as exc:  # the plugin's own code
        raise build_failure(plugins, source, kind, name, path, exc) from exc


def engine_failure(plugins: Plugins, source: str | None, backend: str, path: str
                   ) -> Callable[[Exception], Any]:
    """What an :class:`~servesim.factory.EngineFactory` raises when its backend's ranks fail
    to build (``EngineFactory.name_failure``)."""
    def name(exc: Exception) -> ConfigError:
        return build_failure(plugins, source, "backend", backend, path, exc)
    return name
