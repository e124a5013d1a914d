"""servesim-dynamo-planner: NVIDIA Dynamo's planner in the loop of an elastic replay.

The names below load on first use (PEP 562), so the plugin's registration imports nothing."""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it.
_HOMES = {"DynamoPlanner": "planner", "DynamoPlannerConfig": "planner", "FpmBuffer": "convert",
          "RecordedAdapter": "recorded", "TickPayload": "convert", "fpm_record": "convert"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
