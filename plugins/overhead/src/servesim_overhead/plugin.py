"""Entry-point module of servesim-overhead: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    """Register ``overhead``: engine costs around an inner timing model's kernels."""
    registry.add_lazy("overhead", "servesim_overhead.timing:OverheadTiming")
