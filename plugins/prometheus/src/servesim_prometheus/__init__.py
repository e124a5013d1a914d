"""servesim-prometheus: vLLM 0.32's (or SGLang's) Prometheus metrics for simulated engines.

:mod:`servesim_prometheus.metrics` is the registry a live server updates and exposes at
``/metrics``; the ``prometheus`` FPM sink writes a replay's metrics as an OpenMetrics file
with simulated timestamps (docs/wire.md). Names load on first use, so the plugin's
registration does not import prometheus-client."""

from __future__ import annotations

from typing import Any

__all__ = ["EngineMetrics", "FinishedRequest"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servesim_prometheus import metrics

        return getattr(metrics, name)
    raise AttributeError(f"module 'servesim_prometheus' has no attribute {name!r}")
