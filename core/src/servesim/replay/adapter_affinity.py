"""LoRA adapter affinity for the ``kv`` router (``cluster.router_config.adapter_affinity``).

A front-end router cannot see which adapters a worker holds in its GPU slots, but it knows
which adapters it sent where: per slot it keeps the last ``adapter_slots`` distinct adapters
routed there (least recently routed dropped first, as the engine's own slots evict, servesim.
mechanics.lora), and treats those as loaded. A LoRA request's cost on a slot whose set holds
its adapter is lowered by ``adapter_affinity`` (in the cost's unit, KV blocks), so a router
with a positive weight keeps each adapter on few workers and saves their adapter loads,
trading some load balance; 0 (the default) leaves routing as it was.
"""

from __future__ import annotations

from collections import OrderedDict

from servesim.errors import ConfigError


class AdapterAffinity:
    """The routed-adapter sets of every slot."""

    __slots__ = ("weight", "capacity", "sets")

    def __init__(self, weight: float, capacity: int, num_slots: int) -> None:
        self.weight = weight
        self.capacity = capacity
        self.sets: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(num_slots)]

    @classmethod
    def build(cls, weight: float, capacity: int, num_slots: int) -> AdapterAffinity:
        """Checked settings: a ConfigError names the bad ``cluster.router_config`` key."""
        if not (isinstance(weight, (int, float)) and 0 <= weight < float("inf")):
            raise ConfigError(f"expected a finite number >= 0, got {weight!r}",
                              path="cluster.router_config.adapter_affinity")
        if not (isinstance(capacity, int) and capacity >= 1):
            raise ConfigError(f"expected an integer >= 1, got {capacity!r}",
                              path="cluster.router_config.adapter_slots")
        return cls(weight, capacity, num_slots)

    def adjust(self, lora: int, cost: list[float]) -> list[float]:
        """``cost`` with the credit applied to the slots that hold ``lora``."""
        if not lora:
            return cost
        w = self.weight
        return [c - w if lora in held else c for c, held in zip(cost, self.sets, strict=True)]

    def routed(self, lora: int, slot: int) -> None:
        if not lora:
            return
        held = self.sets[slot]
        if lora in held:
            held.move_to_end(lora)
            return
        held[lora] = None
        if len(held) > self.capacity:
            held.popitem(last=False)


__all__ = ["AdapterAffinity"]
