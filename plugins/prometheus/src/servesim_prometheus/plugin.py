"""Entry-point module of servesim-prometheus: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_fpm_sinks(registry: Registry) -> None:
    """``prometheus``: a replay's vLLM/SGLang metrics as an OpenMetrics file (servesim_prometheus.sink)."""
    registry.add_lazy("prometheus", "servesim_prometheus.sink:PrometheusFpmSink")
