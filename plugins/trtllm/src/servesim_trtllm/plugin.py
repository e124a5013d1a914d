"""Entry-point module of servesim-trtllm: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_backends(registry: Registry) -> None:
    """Register the ``trtllm`` rank (TensorRT-LLM capacity + micro-batch scheduling)."""
    registry.add_lazy("trtllm", "servesim_trtllm.rank:TrtllmRank")
