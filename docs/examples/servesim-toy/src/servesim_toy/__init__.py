"""servesim-toy: the example plugin of docs/writing-a-plugin.md."""

from servesim_toy.rank import ToyConfig, ToyRank
from servesim_toy.timing import ConstantTiming, ConstantTimingConfig

__all__ = ["ConstantTiming", "ConstantTimingConfig", "ToyConfig", "ToyRank"]
