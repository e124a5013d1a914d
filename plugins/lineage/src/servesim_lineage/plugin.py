"""Entry-point module: hook implementations only; the policy is imported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_eviction_policies(registry: Registry) -> None:
    registry.add_lazy("lineage", "servesim_lineage.policy:LineageEviction")
