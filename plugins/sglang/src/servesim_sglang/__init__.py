"""servesim-sglang: the ``sglang`` scheduler backend for servesim (radix-cache scheduling).

Importing the package is cheap: its names load on first attribute access, so plugin discovery
imports none of the scheduler's modules.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["RadixCache", "SchedulePolicy", "SglangConfig", "SglangRank"]

_HOME = {"RadixCache": "radix_cache", "SchedulePolicy": "policies", "SglangConfig": "config",
         "SglangRank": "rank"}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"servesim_sglang.{module}"), name)
