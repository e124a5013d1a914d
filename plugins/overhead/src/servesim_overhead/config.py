"""``engine.timing_model: {type: overhead, inner: {...}, ...}`` options.

Every term left unset takes the engine backend's default (:mod:`servesim_overhead.defaults`).
"""

from __future__ import annotations

import math
from typing import Any

from attrs import field, frozen, validators

MIXED = ("sum", "fused")


def _inner(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError("inner must be a timing model mapping with a type, such as {type: aic, model: ...}")
    if value["type"] == "overhead":
        raise ValueError("inner cannot be another overhead model")


def _ms(_inst: Any, attr: Any, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{attr.name} must be a finite number >= 0, got {value!r}")


def _mixed(_inst: Any, _attr: Any, value: str | None) -> None:
    if value is not None and value not in MIXED:
        raise ValueError(f"mixed must be one of {', '.join(MIXED)}, got {value!r}")


def _layers(_inst: Any, _attr: Any, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"num_layers must be >= 1, got {value}")


_opt_ms = [validators.optional(validators.instance_of((int, float))), _ms]


@frozen(kw_only=True)
class OverheadTimingConfig:
    """The inner model and the terms added around it (see servesim_overhead.timing)."""

    inner: dict[str, Any] = field(validator=_inner)
    step_ms: float | None = field(default=None, validator=_opt_ms)
    per_request_ms: float | None = field(default=None, validator=_opt_ms)
    prefill_ms_per_layer: float | None = field(default=None, validator=_opt_ms)
    overlap: bool | None = field(default=None, validator=validators.optional(validators.instance_of(bool)))
    cuda_graph_padding: bool | None = field(default=None,
                                            validator=validators.optional(validators.instance_of(bool)))
    mixed: str | None = field(default=None, validator=[validators.optional(validators.instance_of(str)), _mixed])
    num_layers: int | None = field(default=None, validator=[validators.optional(validators.instance_of(int)),
                                                             _layers])
