"""Registers the ``dynamo`` planner (Dynamo's own planner is imported only when one is built)."""

from __future__ import annotations

from typing import Any

from servesim import hookimpl


@hookimpl
def servesim_register_planners(registry: Any) -> None:
    from servesim_dynamo_planner.planner import DynamoPlanner

    registry.add("dynamo", DynamoPlanner)
