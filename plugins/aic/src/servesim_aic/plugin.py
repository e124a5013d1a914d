"""Entry-point module of servesim-aic: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    """Register ``aic``: per-pass latency of a real deployment (model, GPU, backend, TP)."""
    registry.add_lazy("aic", "servesim_aic.timing:AicTiming")
