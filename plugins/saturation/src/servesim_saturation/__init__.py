"""A saturation-based autoscaler for servesim's elastic replay (planner ``saturation``)."""

from servesim_saturation.planner import SaturationConfig, SaturationPlanner

__all__ = ["SaturationConfig", "SaturationPlanner"]
