"""Configuration: typed sections, one cattrs converter, YAML loading and ``--set`` overrides."""

from servesim.config.engine import EngineConfig, PreemptionMode, resolve_block_size

__all__ = ["EngineConfig", "PreemptionMode", "resolve_block_size"]
