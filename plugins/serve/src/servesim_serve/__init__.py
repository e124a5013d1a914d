"""servesim-serve: ``servesim serve``, an OpenAI-compatible HTTP server whose tokens are paced
by the simulated engine (docs/serve.md).

Importing the package is cheap; the server, its driver and its config load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LiveDriver", "ReasoningConfig", "ServeConfig", "build_app"]


def __getattr__(name: str) -> Any:
    if name in ("ServeConfig", "ReasoningConfig"):
        from servesim_serve import config

        return getattr(config, name)
    if name == "LiveDriver":
        from servesim_serve.driver import LiveDriver

        return LiveDriver
    if name == "build_app":
        from servesim_serve.app import build_app

        return build_app
    raise AttributeError(name)
