"""The ``aic`` timing model: each pass priced by AIConfigurator for one real deployment.

Pricing follows the reference's AIC provider (dynamo-mocker.md §4.3 and Dynamo's
``dynamo/_internal/ais.py``):

* prefill: ``predict_prefill(batch, isl - prefix, prefix)``, i.e. one forward over
  ``batch`` requests each computing ``isl - prefix`` new tokens over a ``prefix``-token
  cache (``AicEngine.predict_prefill_latency(batch, isl, prefix)`` prices exactly that);
  0 when nothing new is computed;
* decode: ``predict_decode(batch, context_length, osl=2)``, one generation step of
  ``batch`` requests at the mean context length, floored at 1 ms like every model (§4.1);
* attention DP: the reference's offline engine holds the global batch and prices
  ``ceil(batch / attention_dp)`` per rank. A servesim rank already holds its own share,
  so the batch is divided by ``attention_dp / engine.dp_size`` (1 with the default
  ``attention_dp = engine.dp_size``);
* a latency that is NaN or negative becomes the minimum (0 for prefill, the 1 ms floor
  for decode).

Results are pure functions of the shape, so they are memoised per shape: a decode batch
revisits the same ``(batch, context)`` pairs pass after pass.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from servesim.config.engine import EngineConfig
from servesim.timing.base import TimingModel

from servesim_aic import deployment
from servesim_aic.config import AicTimingConfig

DECODE_FLOOR_MS = 1.0
DECODE_OSL = 2


class AicTiming(TimingModel):
    """AIConfigurator's per-pass latency for ``model`` on ``system`` (see module docs)."""

    config_class = AicTimingConfig

    def __init__(self, config: AicTimingConfig, engine: EngineConfig | None = None) -> None:
        self.cfg = config
        self.engine_config = engine if engine is not None else EngineConfig()
        self.deployment = deployment.resolve(config, self.engine_config)
        self.batch_divisor = self.deployment.attention_dp // self.engine_config.dp_size
        self._engine: Any = None
        self._prefill: dict[tuple[int, int, int], float] = {}
        self._decode: dict[tuple[int, int], float] = {}

    @classmethod
    def for_engine(cls, config: Any, engine: EngineConfig) -> AicTiming:
        return cls(config, engine)

    @classmethod
    def auto_num_gpu_blocks(cls, config: Any, engine: EngineConfig) -> int:
        dep = deployment.resolve(config, engine)
        return deployment.num_gpu_blocks(dep, config, engine, engine.bs)

    @property
    def gpus_per_rank(self) -> int:
        return self.deployment.tp * self.deployment.pp

    @property
    def engine(self) -> Any:
        """The compiled ``AicEngine`` (built on first use, shared per deployment)."""
        if self._engine is None:
            self._engine = deployment.engine_for(self.deployment, deployment.cache_dir(self.cfg))
        return self._engine

    def _batch(self, batch_size: int) -> int:
        return -(-batch_size // self.batch_divisor)

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        if batch_size <= 0 or mean_isl - mean_prefix <= 0:
            return 0.0
        key = (batch_size, mean_isl, mean_prefix)
        ms = self._prefill.get(key)
        if ms is None:
            ms = self.engine.predict_prefill_latency(self._batch(batch_size), mean_isl, max(mean_prefix, 0))
            ms = self._prefill[key] = ms if math.isfinite(ms) and ms >= 0 else 0.0
        return ms

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        if batch_size <= 0:
            return 0.0
        key = (batch_size, mean_context_length)
        ms = self._decode.get(key)
        if ms is None:
            ms = self.engine.predict_decode_latency(self._batch(batch_size), mean_context_length, DECODE_OSL)
            ms = self._decode[key] = max(DECODE_FLOOR_MS, ms) if math.isfinite(ms) else DECODE_FLOOR_MS
        return ms

    def predict_decode_ms_many(
        self, batch_size: int, active_kv_tokens: np.ndarray, total_kv_tokens: int
    ) -> np.ndarray:
        if batch_size <= 0:
            return np.zeros(len(active_kv_tokens))
        predict = self.predict_decode_ms
        return np.array([predict(batch_size, a, a // batch_size, total_kv_tokens)
                         for a in active_kv_tokens.tolist()], dtype=np.float64)
