"""Built-in KV-cache plugins: the ``lru`` eviction policy (dynamo-mocker.md §3.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._markers import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_eviction_policies(registry: Registry) -> None:
    from servesim.kv.eviction import LruEviction

    registry.add("lru", LruEviction)
