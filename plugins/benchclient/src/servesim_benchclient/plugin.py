"""Entry-point module of servesim-benchclient: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_trace_formats(registry: Registry) -> None:
    """Register ``bench_client``: a benchmark client's load from its options."""
    registry.add_lazy("bench_client", "servesim_benchclient.reader:BenchClientFormat")
