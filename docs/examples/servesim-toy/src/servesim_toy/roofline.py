"""A toy pass-shape timing model: a pass costs the time to read the KV cache it attends to.

It implements ``predict_pass_ms`` only, so it sees every request of the pass (each prefill
chunk with its cached prefix, each decode context) and the engine's geometry. It is a sketch
of a memory-bound roofline, not a calibrated model. Like every backend's pricing, a pass is
a prefill call then a decode call, each scaled by its own speed-up, and a decode worker
prefills nothing while a prefill worker decodes nothing (the timing kit checks both).
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from servesim import TimingModel
from servesim.contract import WorkerType
from servesim.timing.base import scaled_ms
from servesim.timing.shape import PassShape


@frozen
class RooflineConfig:
    """``engine.timing_model: {type: toy_roofline, bandwidth_gb_s: 3000, overhead_ms: 0.5}``."""

    bandwidth_gb_s: float = 3000.0
    overhead_ms: float = 0.5
    prefill_tokens_per_ms: float = 20000.0


class RooflineTiming(TimingModel):
    config_class = RooflineConfig

    def __init__(self, config: RooflineConfig | None = None) -> None:
        self.cfg = config or RooflineConfig()
        if not self.cfg.bandwidth_gb_s > 0:
            raise ValueError(f"bandwidth_gb_s must be > 0, got {self.cfg.bandwidth_gb_s}")

    @classmethod
    def for_engine(cls, config: Any, engine: Any) -> RooflineTiming:
        """Where a model checks what it needs of the engine it prices, so that ``servesim
        validate`` refuses what it could not price."""
        model = cls(config)
        if engine.kv_bytes_per_token is None and None in (engine.num_layers, engine.num_kv_heads,
                                                          engine.head_dim):
            raise ValueError("toy_roofline needs engine.num_layers, num_kv_heads and head_dim")
        return model

    def predict_pass_ms(self, shape: PassShape) -> float:
        # A decode worker's prefill and a prefill worker's decode cost nothing.
        prefill = shape.prefill if shape.worker_type is not WorkerType.DECODE else ()
        decode = shape.decode if shape.worker_type is not WorkerType.PREFILL else ()
        if not prefill and not decode:
            return 0.0  # a pass with no model work takes no time
        per_token = shape.geometry.kv_bytes_per_token
        if per_token is None:
            raise ValueError("toy_roofline needs engine.num_layers, num_kv_heads and head_dim")
        bytes_per_ms = self.cfg.bandwidth_gb_s * 1e6
        ms = 0.0
        if prefill:  # every prefill chunk attends to its whole context
            read_ms = sum(c.context_length for c in prefill) * per_token / bytes_per_ms
            compute_ms = sum(c.tokens for c in prefill) / self.cfg.prefill_tokens_per_ms
            ms += scaled_ms(self.cfg.overhead_ms + max(read_ms, compute_ms), shape.speedup_ratio)
        if decode:  # every decode step reads its context
            read_ms = sum(decode) * per_token / bytes_per_ms
            ms += scaled_ms(self.cfg.overhead_ms + read_ms, shape.decode_speedup)
        return ms
