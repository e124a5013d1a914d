"""The configurations of the built-in timing models (:mod:`servesim.timing.builtin`): attrs
classes, which stay interpreted in the compiled build."""

from __future__ import annotations

import math

from attrs import field, frozen, validators


def _coefficients(_inst: object, attribute: object, value: tuple[float, float, float] | None) -> None:
    if value is None:
        return
    name = getattr(attribute, "name", "value")
    if len(value) != 3 or not all(isinstance(v, float) and math.isfinite(v) for v in value):
        raise ValueError(f"{name} must be three finite numbers [a, b, c] (a*x^2 + b*x + c), got {value!r}")


@frozen
class PolynomialTimingConfig:
    """Optional coefficients ``[a, b, c]`` replacing the reference's: ``prefill`` over the
    batch's new tokens, ``decode`` over KV utilisation (``servesim calibrate`` fits them)."""

    prefill: tuple[float, float, float] | None = field(default=None, validator=_coefficients)
    decode: tuple[float, float, float] | None = field(default=None, validator=_coefficients)


def _finite_non_negative(_inst: object, attribute: object, value: float) -> None:
    if not math.isfinite(value) or value < 0:
        name = getattr(attribute, "name", "value")
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


@frozen
class FixedTimingConfig:
    prefill_ms: float = field(default=10.0, validator=[validators.instance_of(float), _finite_non_negative])
    decode_ms: float = field(default=1.0, validator=[validators.instance_of(float), _finite_non_negative])


__all__ = ["FixedTimingConfig", "PolynomialTimingConfig"]
