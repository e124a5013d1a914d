"""servesim-lfu: the `lfu` eviction policy for servesim: least frequently used first, as SGLang's --radix-eviction-policy lfu.

Importing the package is cheap; the policy loads on first attribute access.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LfuEviction"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from servesim_lfu import policy

        return getattr(policy, name)
    raise AttributeError(name)
