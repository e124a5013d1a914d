"""Fit the per-step CPU terms (``step_ms``, ``per_request_ms``) to measured mean TPOTs.

Input: for each benchmark result, the mean TPOT servesim predicts with both terms at zero,
the measured mean TPOT and the batch a decode step holds (the client's concurrency). A
decode step of ``b`` requests then costs ``step_ms + per_request_ms * b`` of CPU time, added
to the GPU time on an engine that runs the two one after the other and overlapped with it
(``max``) otherwise, so each result's predicted TPOT moves to
``tpot + cpu`` or ``max(tpot, cpu)``. The terms minimise the mean absolute percentage
error over a grid (``step_ms`` 0–15 ms by 0.1, ``per_request_ms`` 0–0.2 ms by 0.002).
The fitted terms are then checked by replaying with them (the calling command does).
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen


@frozen
class Sample:
    predicted_tpot_ms: float  # with step_ms = per_request_ms = 0
    measured_tpot_ms: float
    batch: int


def moved(s: Sample, step_ms: float, per_request_ms: float, overlap: bool) -> float:
    cpu = step_ms + per_request_ms * s.batch
    return max(s.predicted_tpot_ms, cpu) if overlap else s.predicted_tpot_ms + cpu


def mape(pairs: Sequence[tuple[float, float]]) -> float:
    """Mean absolute percentage error of ``(predicted, measured)`` pairs, in percent."""
    return 100.0 * sum(abs(p - m) / m for p, m in pairs) / len(pairs) if pairs else float("nan")


def fit_terms(samples: Sequence[Sample], overlap: bool) -> tuple[float, float]:
    """``(step_ms, per_request_ms)`` minimising the TPOT MAPE of ``samples``."""
    best = (float("inf"), 0.0, 0.0)
    for step10 in range(151):
        step = step10 / 10
        for per500 in range(101):
            per = per500 / 500
            err = sum(abs(moved(s, step, per, overlap) - s.measured_tpot_ms) / s.measured_tpot_ms
                      for s in samples)
            if err < best[0] - 1e-12:
                best = (err, step, per)
    return best[1], best[2]
