"""servesim-lineage: the `lineage` eviction policy for servesim: leaf blocks first, the newest lineage last (Dynamo's kvbm-logical LineageBackend).

Importing the package is cheap; the policy loads on first attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LineageEviction"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servesim_lineage import policy

        return getattr(policy, name)
    raise AttributeError(name)
