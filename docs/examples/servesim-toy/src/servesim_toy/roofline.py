"""A toy pass-shape timing model: a pass costs the time to read the KV cache it attends to.

It implements ``predict_pass_ms`` only, so it sees every request of the pass (each prefill
chunk with its cached prefix, each decode context) and the engine's geometry. It is a sketch
of a memory-bound roofline, not a calibrated model.
"""

from __future__ import annotations

from attrs import frozen
from servesim import TimingModel
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

    def predict_pass_ms(self, shape: PassShape) -> float:
        if not shape.prefill and not shape.decode:
            return 0.0  # a pass with no model work takes no time
        per_token = shape.geometry.kv_bytes_per_token
        if per_token is None:
            raise ValueError("toy_roofline needs engine.num_layers, num_kv_heads and head_dim")
        # Every prefill chunk attends to its whole context; every decode step to its context.
        tokens_read = sum(c.context_length for c in shape.prefill) + sum(shape.decode)
        read_ms = tokens_read * per_token / (self.cfg.bandwidth_gb_s * 1e6)
        compute_ms = sum(c.tokens for c in shape.prefill) / self.cfg.prefill_tokens_per_ms
        return scaled_ms(self.cfg.overhead_ms + max(read_ms, compute_ms), shape.speedup_ratio)
