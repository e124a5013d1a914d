"""Entry-point module of servesim-sglang: hook implementations only; machinery loads lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_backends(registry: Registry) -> None:
    registry.add_lazy("sglang", "servesim_sglang.rank:SglangRank")


@hookimpl
def servesim_register_schedule_policies(registry: Registry) -> None:
    from servesim_sglang.policies import register_builtin_policies

    register_builtin_policies(registry)
