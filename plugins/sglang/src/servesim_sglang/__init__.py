"""servesim-sglang: the ``sglang`` scheduler backend for servesim (radix-cache scheduling)."""

from servesim_sglang.config import SglangConfig
from servesim_sglang.policies import SchedulePolicy
from servesim_sglang.radix_cache import RadixCache

__all__ = ["RadixCache", "SchedulePolicy", "SglangConfig", "SglangRank"]


def __getattr__(name: str) -> object:
    # The rank pulls in the scheduler; import it only when asked for.
    if name == "SglangRank":
        from servesim_sglang.rank import SglangRank

        return SglangRank
    raise AttributeError(name)
