"""servesim-toy: the example plugin of docs/writing-a-plugin.md, one of each plugin kind."""

from servesim_toy.rank import ToyConfig, ToyRank
from servesim_toy.roofline import RooflineConfig, RooflineTiming
from servesim_toy.router import LeastLoadedRouter
from servesim_toy.sinks import TallyConfig, TallySink
from servesim_toy.timing import ConstantTiming, ConstantTimingConfig
from servesim_toy.trace import CsvTrace

__all__ = [
    "ConstantTiming",
    "ConstantTimingConfig",
    "CsvTrace",
    "LeastLoadedRouter",
    "RooflineConfig",
    "RooflineTiming",
    "TallyConfig",
    "TallySink",
    "ToyConfig",
    "ToyRank",
]
