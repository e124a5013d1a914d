"""Entry-point module of servesim-vllm: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_backends(registry: Registry) -> None:
    """``vllm``: a rank that schedules like vLLM's v1 scheduler (servesim_vllm.rank)."""
    registry.add_lazy("vllm", "servesim_vllm.rank:VllmRank")
