"""Built-in timing models: ``polynomial`` (the reference default) and ``fixed``.

Their configurations (attrs classes) are in :mod:`servesim.timing.builtin_config`, which the
compiled build leaves interpreted; this module is compiled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim._compiled import mypyc_attr
from servesim.timing.base import TimingModel
from servesim.timing.builtin_config import FixedTimingConfig, PolynomialTimingConfig

if TYPE_CHECKING:
    import numpy as np

# dynamo-mocker.md §4.1 / aisimulate-engine.md §6.3: the default polynomial coefficients.
PREFILL_A = 4.209989e-07
PREFILL_B = 1.518344e-02
PREFILL_C = 1.650142e01
DECODE_A = -25.74
DECODE_B = 54.01
DECODE_C = 5.74


@mypyc_attr(allow_interpreted_subclasses=True)
class PolynomialTiming(TimingModel):
    """Prefill is quadratic in the batch's new tokens; decode is quadratic in KV usage.

    ``T = batch * (isl - prefix)``; prefill = ``4.209989e-7 T² + 1.518344e-2 T + 16.50142``
    (0 when T is 0). Decode with ``u = min(active/total, 1)`` (1 if total is 0) is
    ``max(1, -25.74 u² + 54.01 u + 5.74)`` ms (0 for an empty batch). Fitted coefficients
    (:class:`PolynomialTimingConfig`) replace either polynomial.
    """

    config_class = PolynomialTimingConfig

    def __init__(self, config: PolynomialTimingConfig | None = None) -> None:
        cfg = config or PolynomialTimingConfig()
        self.pa, self.pb, self.pc = cfg.prefill or (PREFILL_A, PREFILL_B, PREFILL_C)
        self.da, self.db, self.dc = cfg.decode or (DECODE_A, DECODE_B, DECODE_C)

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        t = batch_size * max(mean_isl - mean_prefix, 0)
        if batch_size <= 0 or t <= 0:
            return 0.0
        return max(0.0, self.pa * t * t + self.pb * t + self.pc)

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        if batch_size <= 0:
            return 0.0
        u = min(active_kv_tokens / total_kv_tokens, 1.0) if total_kv_tokens > 0 else 1.0
        return max(1.0, self.da * u * u + self.db * u + self.dc)

    def predict_decode_ms_many(
        self, batch_size: int, active_kv_tokens: np.ndarray, total_kv_tokens: int
    ) -> np.ndarray:
        import numpy as np

        # Element-wise IEEE operations in the scalar formula's order: identical results.
        if batch_size <= 0:
            return np.zeros(len(active_kv_tokens))
        if total_kv_tokens > 0:
            u = np.minimum(active_kv_tokens / total_kv_tokens, 1.0)
        else:
            u = np.ones(len(active_kv_tokens))
        return np.maximum(1.0, self.da * u * u + self.db * u + self.dc)


@mypyc_attr(allow_interpreted_subclasses=True)
class FixedTiming(TimingModel):
    """Constant latencies for parity fixtures; 0 for an empty batch (reference §6.1)."""

    config_class = FixedTimingConfig

    def __init__(self, config: FixedTimingConfig | None = None) -> None:
        self.cfg = config or FixedTimingConfig()

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        if batch_size <= 0 or mean_isl - mean_prefix <= 0:
            return 0.0
        return self.cfg.prefill_ms

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        return self.cfg.decode_ms if batch_size > 0 else 0.0

    def predict_decode_ms_many(
        self, batch_size: int, active_kv_tokens: np.ndarray, total_kv_tokens: int
    ) -> np.ndarray:
        import numpy as np

        return np.full(len(active_kv_tokens), self.cfg.decode_ms if batch_size > 0 else 0.0)


__all__ = ["FixedTiming", "FixedTimingConfig", "PolynomialTiming", "PolynomialTimingConfig"]
