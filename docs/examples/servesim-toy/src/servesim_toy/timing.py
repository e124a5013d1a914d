"""A toy timing model: every non-empty pass takes ``pass_ms`` milliseconds."""

from __future__ import annotations

from attrs import frozen
from servesim import TimingModel


@frozen
class ConstantTimingConfig:
    """``engine.timing_model: {type: toy_constant, pass_ms: 5.0}``."""

    pass_ms: float = 1.0


class ConstantTiming(TimingModel):
    config_class = ConstantTimingConfig

    def __init__(self, config: ConstantTimingConfig | None = None) -> None:
        self.pass_ms = (config or ConstantTimingConfig()).pass_ms
        if not self.pass_ms > 0:
            raise ValueError(f"pass_ms must be > 0, got {self.pass_ms}")

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        return self.pass_ms if batch_size > 0 else 0.0

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        return self.pass_ms if batch_size > 0 else 0.0
