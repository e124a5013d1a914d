"""Registers the ``saturation`` planner."""

from __future__ import annotations

from typing import Any

from servesim import hookimpl


@hookimpl
def servesim_register_planners(registry: Any) -> None:
    from servesim_saturation.planner import SaturationPlanner

    registry.add("saturation", SaturationPlanner)
