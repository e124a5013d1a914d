"""servesim-multi-lru: the `multi_lru` eviction policy for servesim: frequency tiers promoted by hits, LRU within a tier (Dynamo's MultiLruBackend).

Importing the package is cheap; the policy loads on first attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MultiLruConfig", "MultiLruEviction"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servesim_multi_lru import policy

        return getattr(policy, name)
    raise AttributeError(name)
