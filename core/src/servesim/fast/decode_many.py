"""Pricing many decode passes at once: an optional protocol a timing model may implement.

Runs of passes (:mod:`servesim.fast.run_pending`) price the steady decode passes of one batch
in numpy chunks. A timing model that can price a whole array of passes in one call implements
:class:`PricesManyDecodes`; it needs no import of this module (the check is structural). Every
other model is priced pass by pass through its scalar ``predict_decode_ms``, with the same
results: an implementation must equal the scalar method bit for bit, which the timing kit's
``many_matches_scalar`` check verifies (:mod:`servesim.testing.timing_kit`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class PricesManyDecodes(Protocol):
    """A timing model that prices several decode passes of one batch in one call."""

    def predict_decode_ms_many(
        self, batch_size: int, active_kv_tokens: np.ndarray, total_kv_tokens: int
    ) -> np.ndarray:
        """``predict_decode_ms`` for several passes of one ``batch_size`` batch whose summed
        KV lengths are ``active_kv_tokens`` (an int64 array; the mean context is
        ``active // batch_size``), as a float64 array, equal to the scalar results."""
        ...


#: Per timing-model class, whether it implements :class:`PricesManyDecodes` (a structural
#: check walks the members, and runs ask once per chunk of passes).
_IMPLEMENTS: dict[type, bool] = {}


def decode_ms_many(timing: Any, batch_size: int, active_kv_tokens: np.ndarray,
                   total_kv_tokens: int) -> np.ndarray:
    """The raw decode milliseconds of the passes ``active_kv_tokens`` describe: through the
    model's :class:`PricesManyDecodes` method when it has one, else one scalar call per pass."""
    many = _IMPLEMENTS.get(type(timing))
    if many is None:
        many = _IMPLEMENTS[type(timing)] = isinstance(timing, PricesManyDecodes)
    if many:
        return timing.predict_decode_ms_many(batch_size, active_kv_tokens, total_kv_tokens)
    return np.array(
        [timing.predict_decode_ms(batch_size, a, a // batch_size, total_kv_tokens)
         for a in active_kv_tokens.tolist()],
        dtype=np.float64,
    )


__all__ = ["PricesManyDecodes", "decode_ms_many"]
