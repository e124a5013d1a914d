"""Entry-point module of servesim-agentic: hook implementations only; readers load lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_trace_formats(registry: Registry) -> None:
    """Register ``agentic_mooncake``, ``dynamo_agent_trace``, ``applied_compute_agentic``,
    ``weka`` and ``dynamo_request_trace``."""
    registry.add_lazy("agentic_mooncake", "servesim_agentic.agentic_mooncake:AgenticMooncakeTrace")
    registry.add_lazy("dynamo_agent_trace", "servesim_agentic.dynamo_trace:DynamoAgentTrace")
    registry.add_lazy("applied_compute_agentic",
                      "servesim_agentic.applied_compute:AppliedComputeAgenticTrace")
    registry.add_lazy("weka", "servesim_agentic.weka:WekaTrace")
    registry.add_lazy("dynamo_request_trace", "servesim_agentic.dynamo_request:DynamoRequestTrace")
