"""Built-in timing models: ``polynomial`` (the reference default, dynamo-mocker.md §4.1),
``fixed`` (constant latencies, aisimulate-engine.md §6.1) and ``interpolated`` (profile
tables, dynamo-mocker.md §4.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._markers import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    registry.add_lazy("polynomial", "servesim.timing.builtin:PolynomialTiming")
    registry.add_lazy("fixed", "servesim.timing.builtin:FixedTiming")
    registry.add_lazy("interpolated", "servesim.timing.interpolated:InterpolatedTiming")
