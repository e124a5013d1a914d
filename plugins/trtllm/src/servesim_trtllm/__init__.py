"""servesim-trtllm: the `trtllm` scheduler backend for servesim.

Importing the package is cheap; :class:`TrtllmRank` and :class:`TrtllmConfig` load on first
attribute access so that plugin discovery does not import the scheduler.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CapacitySchedulerPolicy", "TrtllmConfig", "TrtllmRank"]


def __getattr__(name: str) -> Any:
    if name == "TrtllmRank":
        from servesim_trtllm.rank import TrtllmRank

        return TrtllmRank
    if name in ("TrtllmConfig", "CapacitySchedulerPolicy"):
        from servesim_trtllm import config

        return getattr(config, name)
    raise AttributeError(name)
