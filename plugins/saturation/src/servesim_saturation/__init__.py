"""A saturation-based autoscaler for servesim's elastic replay (planner ``saturation``).

The names below load on first use (PEP 562), so the plugin's registration imports nothing."""

from __future__ import annotations

from typing import Any

__all__ = ["SaturationConfig", "SaturationPlanner"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servesim_saturation import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
