"""servesim-aic: the ``aic`` timing model, priced by AIConfigurator's measured kernel data.

Importing the package is cheap; :class:`AicTiming` and :class:`AicTimingConfig` load on first
attribute access so that plugin discovery does not import aiconfigurator-core.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AicTiming", "AicTimingConfig"]


def __getattr__(name: str) -> Any:
    if name == "AicTiming":
        from servesim_aic.timing import AicTiming

        return AicTiming
    if name == "AicTimingConfig":
        from servesim_aic.config import AicTimingConfig

        return AicTimingConfig
    raise AttributeError(name)
