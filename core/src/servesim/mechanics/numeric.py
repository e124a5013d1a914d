"""Small numeric helpers of the contract: running mean, Welford variance, MTP acceptance
rates and time validation (aisimulate-engine.md §10, §11, §2.4)."""

from __future__ import annotations

import math


class RunningMean:
    """Incremental mean (reference §11: ``add(x)``; ``mean()`` is 0 when empty)."""

    __slots__ = ("count", "_mean")

    def __init__(self) -> None:
        self.count = 0
        self._mean = 0.0

    def add(self, x: float) -> None:
        self.count += 1
        self._mean += (x - self._mean) / self.count

    def mean(self) -> float:
        return self._mean if self.count else 0.0


class Welford:
    """Population mean/variance accumulator used for forward-pass metrics."""

    __slots__ = ("n", "mean", "m2", "total")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.total = 0

    def add(self, x: float) -> None:
        self.n += 1
        self.total += x  # type: ignore[assignment]
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    def variance(self) -> float:
        return self.m2 / self.n if self.n > 1 else 0.0


DEFAULT_ACCEPT_RATES = (0.85, 0.3, 0.0, 0.0, 0.0)


def normalize_conditional_accept_rates(nextn: int, rates: str | None) -> tuple[float, ...]:
    """Validate, then pad with zeros or truncate to ``nextn`` (aisimulate-engine.md §10).

    ``(3, "1, 0.5")`` → ``(1.0, 0.5, 0.0)``; ``(2, "1,0.5,0.25")`` → ``(1.0, 0.5)``.
    Raises ValueError naming the bad entry (``aic_nextn_accept_rates[i]``).
    """
    if nextn <= 0:
        raise ValueError(f"aic_nextn must be > 0, got {nextn}")
    if rates is None or not rates.strip():
        values: list[float] = list(DEFAULT_ACCEPT_RATES)
    else:
        values = []
        for i, part in enumerate(rates.split(",")):
            text = part.strip()
            try:
                v = float(text)
            except ValueError:
                raise ValueError(
                    f"aic_nextn_accept_rates[{i}]: {text!r} is not a number"
                ) from None
            if not math.isfinite(v) or not 0.0 <= v <= 1.0:
                raise ValueError(
                    f"aic_nextn_accept_rates[{i}]: {text!r} must be a finite rate in [0, 1]"
                )
            values.append(v)
    values = values[:nextn] + [0.0] * max(0, nextn - len(values))
    return tuple(values)


def validate_time(name: str, value: float) -> None:
    """Every time argument must be finite and >= 0 (aisimulate-engine.md §2.4)."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
