"""Registers the ``dynamo`` planner (Dynamo's own planner is imported only when one is built)."""

from __future__ import annotations

from typing import Any

from servesim import hookimpl


@hookimpl
def servesim_register_planners(registry: Any) -> None:
    # Imported only when a run selects it: a replay without it pays nothing at start-up.
    registry.add_lazy("dynamo", "servesim_dynamo_planner.planner:DynamoPlanner")
