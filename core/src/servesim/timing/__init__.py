"""Timing models: the hook interface and the built-in models."""

from servesim.timing.base import TimingModel, scaled_ms
from servesim.timing.builtin import FixedTiming, FixedTimingConfig, PolynomialTiming

__all__ = ["FixedTiming", "FixedTimingConfig", "PolynomialTiming", "TimingModel", "scaled_ms"]
