"""The ``overhead`` timing model: an inner model's kernel time plus the engine's own costs.

A pass lasts ``gpu + cpu`` (or ``max(gpu, cpu)`` where the engine overlaps the two):

* ``gpu``: the inner model's price of the pass, after two corrections of its shape:

  - CUDA-graph padding (``cuda_graph_padding``): a decode-only pass of ``n`` requests
    computes the captured batch size ``padded(n)`` (:mod:`servesim_overhead.cuda_graphs`);
    the padding rows are priced at the batch's mean context;
  - fused mixed passes (``mixed: fused``): prefill chunks and decode requests in one pass
    are one forward pass, priced by AIConfigurator's ``mixed_step_latency`` (one read of the
    weights for all tokens, context attention for the chunks, decode attention for the
    rest) instead of the sum of a prefill and a decode pass. Needs an ``aic`` inner model;
    ``sum`` keeps the inner model's own pricing;

* ``cpu``: ``step_ms`` per pass (scheduling, input preparation, sampling, output
  processing), ``per_request_ms`` per request in the pass, and ``prefill_ms_per_layer``
  times the model's layers in a pass with prefill chunks (kernels launched outside CUDA
  graphs).

Unset terms take the backend's defaults (:mod:`servesim_overhead.defaults`).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from servesim.config.engine import EngineConfig
from servesim.contract import WorkerType
from servesim.errors import ConfigError
from servesim.timing.base import TimingModel, default_pass_ms
from servesim.timing.pricing import prices_pass_shapes
from servesim.timing.shape import PassShape
from servesim_overhead import cuda_graphs, defaults
from servesim_overhead.config import OverheadTimingConfig

_PATH = "engine.timing_model.inner"


def resolve_inner(inner: dict[str, Any]) -> tuple[type, Any]:
    """The inner timing model's class and its structured options."""
    from servesim.config.converter import make_converter, structure_at
    from servesim.plugins import Plugins

    data = dict(inner)
    name = data.pop("type")
    registry = Plugins().timing_models()
    try:
        cls = registry.get(name)
    except Exception as exc:
        raise ConfigError(str(exc).splitlines()[0], path=f"{_PATH}.type") from None
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        if data:
            raise ConfigError(f"timing model {name!r} takes no options", path=f"{_PATH}.{next(iter(data))}")
        return cls, None
    value, problems = structure_at(make_converter(), data, config_class, _PATH)
    if problems:
        key, message = problems[0]
        raise ConfigError(message, path=key)
    return cls, value


class OverheadTiming(TimingModel):
    """An inner timing model plus the engine's costs around its kernels (see module docs)."""

    config_class = OverheadTimingConfig

    def __init__(self, config: OverheadTimingConfig, engine: EngineConfig | None = None) -> None:
        self.cfg = config
        engine = engine if engine is not None else EngineConfig()
        cls, inner_cfg = resolve_inner(config.inner)
        try:
            self.inner = cls.for_engine(inner_cfg, engine)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc).splitlines()[0], path=_PATH) from None
        d = defaults.for_backend(engine.backend)

        def pick(name: str) -> Any:
            value = getattr(config, name)
            return getattr(d, name) if value is None else value

        self.step_ms = float(pick("step_ms"))
        self.per_request_ms = float(pick("per_request_ms"))
        self.prefill_ms_per_layer = float(pick("prefill_ms_per_layer"))
        self.overlap = bool(pick("overlap"))
        self.mixed = pick("mixed")
        self._fused = self.mixed == "fused" and self._aic_engine_ok()
        if config.mixed == "fused" and not self._fused:
            raise ConfigError("mixed: fused needs an aic inner model without a batch divisor", path="engine.timing_model.mixed")
        self.num_layers = config.num_layers or self._layers(engine)
        system = str(getattr(getattr(self.inner, "cfg", None), "system", ""))
        large = system.startswith(("h200", "b200", "b300", "gb200", "gb300"))
        blackwell = system.startswith(cuda_graphs.BLACKWELL_SYSTEMS)
        self.sizes = (cuda_graphs.capture_sizes(engine.backend, engine.max_num_seqs or 256, large, blackwell)
                      if pick("cuda_graph_padding") else ())
        self._inner_shapes = prices_pass_shapes(self.inner)

    @classmethod
    def for_engine(cls, config: Any, engine: EngineConfig) -> OverheadTiming:
        return cls(config, engine)

    @classmethod
    def auto_num_gpu_blocks(cls, config: Any, engine: EngineConfig) -> int | None:
        inner_cls, inner_cfg = resolve_inner(config.inner)
        return inner_cls.auto_num_gpu_blocks(inner_cfg, engine)

    @property
    def gpus_per_rank(self) -> int:
        return self.inner.gpus_per_rank

    def _aic_engine_ok(self) -> bool:
        return hasattr(self.inner, "deployment") and getattr(self.inner, "batch_divisor", None) == 1

    def _layers(self, engine: EngineConfig) -> int:
        if engine.num_layers:
            return engine.num_layers
        dep = getattr(self.inner, "deployment", None)
        if dep is not None:
            from servesim_overhead.model_layers import num_layers

            return num_layers(dep.model)
        return 0

    # -- pricing -------------------------------------------------------------------------

    def _inner_ms(self, shape: PassShape) -> float:
        return self.inner.predict_pass_ms(shape) if self._inner_shapes else default_pass_ms(self.inner, shape)

    def _gpu_ms(self, shape: PassShape) -> float:
        prefill = shape.prefill if shape.worker_type is not WorkerType.DECODE else ()
        decode = shape.decode if shape.worker_type is not WorkerType.PREFILL else ()
        if decode and not prefill and self.sizes:
            n = len(decode)
            p = cuda_graphs.padded(n, self.sizes)
            if p > n:
                mean = sum(decode) // n
                shape = attrs.evolve(shape, decode=shape.decode + (mean,) * (p - n),
                                     active_kv_tokens=shape.active_kv_tokens + mean * (p - n))
            return self._inner_ms(shape)
        if prefill and decode and self._fused:
            return self._fused_ms(shape, prefill, decode)
        return self._inner_ms(shape)

    def _fused_ms(self, shape: PassShape, prefill: tuple, decode: tuple) -> float:
        n = len(prefill)
        ctx = sum(c.tokens for c in prefill)
        if ctx <= 0:
            return self._inner_ms(shape)
        prefix = sum(c.cached_prefix for c in prefill) // n
        isl = prefix + -(-ctx // n)
        dec_ctx = sum(decode) // len(decode)
        # AIConfigurator prices decode attention at isl + osl / 2 (aiconfigurator_core
        # base_backend.run_mixed); osl places it at the decode requests' mean context.
        osl = max(2, 2 * (dec_ctx - isl))
        key = (ctx, len(decode), isl, osl, prefix)
        cache = self.__dict__.setdefault("_fused_cache", {})
        ms = cache.get(key)
        if ms is None:
            ms = float(self.inner.engine.mixed_step_latency(ctx, len(decode), isl, osl, prefix))
            ms = cache[key] = ms if math.isfinite(ms) and ms > 0 else self._inner_ms(shape)
        speed = shape.speedup_ratio
        return ms / speed if speed > 0 else ms

    def predict_pass_ms(self, shape: PassShape) -> float:
        gpu = self._gpu_ms(shape)
        requests = len(shape.prefill) + len(shape.decode)
        if requests == 0:
            return gpu
        cpu = self.step_ms + self.per_request_ms * requests
        if shape.prefill and shape.worker_type is not WorkerType.DECODE:
            cpu += self.prefill_ms_per_layer * self.num_layers
        return max(gpu, cpu) if self.overlap else gpu + cpu
