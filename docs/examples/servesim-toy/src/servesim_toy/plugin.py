"""Entry-point module: hook implementations only; the machinery is imported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_backends(registry: Registry) -> None:
    from servesim_toy.rank import ToyRank

    registry.add("toy", ToyRank)


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    from servesim_toy.timing import ConstantTiming

    registry.add("toy_constant", ConstantTiming)
