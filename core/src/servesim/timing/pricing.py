"""Pricing a backend's passes from their shapes, for timing models that override
:meth:`~servesim.timing.base.TimingModel.predict_pass_ms` (:mod:`servesim.timing.shape` holds
the shapes themselves)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from servesim.timing.base import TimingModel
from servesim.timing.shape import EngineGeometry, PassShape, PrefillChunk

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig


def prices_pass_shapes(timing: Any) -> bool:
    """True when ``timing`` overrides ``predict_pass_ms`` (backends then price from shapes,
    and engines decline runs of passes)."""
    method = getattr(type(timing), "predict_pass_ms", None)
    return method is not None and method is not TimingModel.predict_pass_ms


class ShapePricer:
    """What a backend keeps to price its passes from shapes: the parts of a shape that do
    not change between passes, and the model."""

    def __init__(self, timing: TimingModel, config: EngineConfig, dp_rank: int) -> None:
        self.timing = timing
        self.backend = config.backend
        self.worker_type = config.worker_type
        self.dp_rank = dp_rank
        self.geometry = EngineGeometry.of(config)
        self.speedup = config.speedup_ratio
        self.decode_speedup = config.decode_speedup

    @classmethod
    def for_rank(cls, timing: Any, config: EngineConfig, dp_rank: int) -> ShapePricer | None:
        """A pricer when ``timing`` prices whole passes, else None (the two-method path)."""
        return cls(timing, config, dp_rank) if prices_pass_shapes(timing) else None

    def price(
        self, prefill: list[PrefillChunk], decode: list[int], active_kv_tokens: int, total_kv_tokens: int
    ) -> float:
        """The pass's duration in ms, rounded to whole nanoseconds; a non-finite or negative
        result is an error, as for the two methods."""
        shape = PassShape(
            self.backend,
            self.worker_type,
            self.dp_rank,
            self.geometry,
            tuple(prefill),
            tuple(decode),
            active_kv_tokens,
            total_kv_tokens,
            self.speedup,
            self.decode_speedup,
        )
        ms = self.timing.predict_pass_ms(shape)
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
            raise ValueError(f"timing model returned an invalid pass duration {ms!r}")
        return round(ms * 1e6) / 1e6


__all__ = ["ShapePricer", "prices_pass_shapes"]
