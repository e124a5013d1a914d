"""The TimingModel hook: batch shape in, simulated milliseconds out.

Matches the AISimulate ``TimingModel`` trait (aisimulate-engine.md §6.2-§6.3): one instance is
shared by every rank of an engine, and it is pure (no clock, no hidden state that changes
results). Ranks call it with the batch composition described in §6.3 and apply speed-up
ratios themselves through :func:`scaled_ms`.

A model implements either the two batch-mean methods (``predict_prefill_ms`` and
``predict_decode_ms``) or :meth:`TimingModel.predict_pass_ms`, which prices one pass from
its full :class:`~servesim.timing.shape.PassShape`. The default ``predict_pass_ms`` is the
adapter between the two: it prices a shape through the two methods exactly as the backends
do (:func:`default_pass_ms`). Backends call ``predict_pass_ms`` only
for a model that overrides it; such a model also makes engines decline runs of passes
(they price many passes at once, :mod:`servesim.fast.decode_many`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

from servesim._compiled import mypyc_attr
from servesim.contract import WorkerType
from servesim.mechanics.lora import LORA_MS_PER_ADAPTER, LORA_REFERENCE_RANK

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np

    from servesim.timing.shape import PassShape


@mypyc_attr(allow_interpreted_subclasses=True)
class TimingModel:
    """Predicts forward-pass durations. Register subclasses through
    ``servesim_register_timing_models``; ``config_class`` (an attrs class or None) validates
    the model's parameters from ``engine.timing_model``."""

    config_class: ClassVar[type | None] = None

    @classmethod
    def from_config(cls, config: Any) -> TimingModel:
        """Build from the structured ``config_class`` instance (None when there is none)."""
        return cls() if config is None else cls(config)

    def __new__(cls, *args: Any, **kwargs: Any) -> TimingModel:
        # Either contract will do; a class that gives neither cannot be built, with the
        # TypeError an abstract class gives (validation reports it with its plugin).
        base = TimingModel
        shaped = cls.predict_pass_ms is not base.predict_pass_ms
        means = (cls.predict_prefill_ms is not base.predict_prefill_ms
                 and cls.predict_decode_ms is not base.predict_decode_ms)
        if not (shaped or means):
            raise TypeError(
                f"Can't instantiate abstract class {cls.__name__}: it implements neither "
                "predict_pass_ms nor both predict_prefill_ms and predict_decode_ms"
            )
        return super().__new__(cls)

    @classmethod
    def for_engine(cls, config: Any, engine: Any) -> TimingModel:
        """Build for one engine section ``engine`` (its :class:`EngineConfig`, block size
        resolved). A model whose prices depend on the engine (its backend, ``dp_size``)
        overrides this; the default ignores the engine."""
        return cls.from_config(config)

    @classmethod
    def auto_num_gpu_blocks(cls, config: Any, engine: Any) -> int | None:
        """KV blocks per rank for ``engine.num_gpu_blocks: auto``, or None when the model
        knows no GPU to size the pool from (the loader then reports a config error)."""
        return None

    @property
    def gpus_per_rank(self) -> int:
        """GPUs one rank's forward pass runs on (tensor x pipeline parallel), for per-GPU
        report figures; 1 unless the model knows its deployment."""
        return 1

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        """Prefill time of ``batch_size`` requests whose mean input length after this pass is
        ``mean_isl`` and whose mean already-computed/cached prefix is ``mean_prefix``."""
        raise NotImplementedError(f"{type(self).__name__} prices whole passes (predict_pass_ms) only")

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        """Decode time of one forward over ``batch_size`` decoding requests."""
        raise NotImplementedError(f"{type(self).__name__} prices whole passes (predict_pass_ms) only")

    def predict_pass_ms(self, shape: PassShape) -> float:
        """Duration in ms of one pass of ``shape`` (speed-ups applied), from the pass's full
        composition. The default prices it through the two methods as every backend does
        (:func:`default_pass_ms`); an override may call it for the parts it does not model
        itself."""
        return default_pass_ms(self, shape)

    def predict_lora_ms(self, ranks: Sequence[int], batch_tokens: int) -> float:
        """Extra milliseconds one pass spends on LoRA (speed-ups not applied): ``ranks`` holds
        the rank of each distinct adapter of the batch (one entry per adapter), and
        ``batch_tokens`` the tokens the pass computes. Called only with LoRA on and at least
        one adapter in the batch. The default charges ``LORA_MS_PER_ADAPTER`` per adapter at
        rank 16, linear in the rank (servesim.mechanics.lora)."""
        return sum(ranks) * (LORA_MS_PER_ADAPTER / LORA_REFERENCE_RANK)


def overrides(cls: type, name: str) -> bool:
    """Whether ``cls`` (a :class:`TimingModel` subclass) or a base of it below
    :class:`TimingModel` defines ``name``. Compares class dictionaries, not method objects:
    in the compiled build a classmethod read from a class is a new bound object each time."""
    for klass in cls.__mro__:
        if klass is TimingModel:
            return False
        if name in vars(klass):
            return True
    return False


def scaled_ms_many(raw_ms: np.ndarray, speedup: float) -> np.ndarray:
    """:func:`scaled_ms` element-wise, with the same float operations (IEEE division and
    round-half-even), so each element equals the scalar result bit for bit."""
    import numpy as np

    if raw_ms.size and (not np.isfinite(raw_ms).all() or (raw_ms < 0).any()):
        bad = raw_ms[~np.isfinite(raw_ms) | (raw_ms < 0)][0]
        raise ValueError(f"timing model returned an invalid duration {float(bad)!r}")
    if speedup > 0:
        raw_ms = np.where(raw_ms > 0, raw_ms / speedup, raw_ms)
    return np.rint(raw_ms * 1e6) / 1e6


def scaled_ms(raw_ms: float, speedup: float) -> float:
    """``raw / speedup`` when both are positive, else ``raw`` (reference §6.3 "Scaling"),
    rounded to whole nanoseconds.

    A non-finite or negative raw value is an error.
    """
    if not math.isfinite(raw_ms) or raw_ms < 0:
        raise ValueError(f"timing model returned an invalid duration {raw_ms!r}")
    if speedup > 0 and raw_ms > 0:
        raw_ms = raw_ms / speedup
    # The reference keeps simulated time as whole nanoseconds; rounding each modelled
    # duration to that grid keeps servesim's pass boundaries identical to it over long
    # runs instead of drifting by float residue.
    return round(raw_ms * 1e6) / 1e6


def default_pass_ms(timing: TimingModel, shape: PassShape) -> float:
    """The two-method pricing every backend applies today, from a shape.

    Prefill (not on a decode worker): one call over the chunks with integer-division means
    ``(n, Σ(prefix+tokens)//n, Σprefix//n)``, skipped when the means are equal
    (aisimulate-engine.md §6.3). Decode (not on a prefill worker): one call
    ``(n, active_kv_tokens, Σcontext//n, total_kv_tokens)``. Each is scaled by its speed-up
    and rounded to whole nanoseconds (:func:`scaled_ms`); the pass
    lasts their sum (prefill and decode run one after the other, §6.4).
    """
    prefill_ms = decode_ms = 0.0
    chunks = shape.prefill
    if chunks and shape.worker_type is not WorkerType.DECODE:
        n = len(chunks)
        prefix = sum(c.cached_prefix for c in chunks)
        isl = prefix + sum(c.tokens for c in chunks)
        if isl // n > prefix // n:
            prefill_ms = scaled_ms(timing.predict_prefill_ms(n, isl // n, prefix // n), shape.speedup_ratio)
    contexts = shape.decode
    if contexts and shape.worker_type is not WorkerType.PREFILL:
        n = len(contexts)
        raw = timing.predict_decode_ms(n, shape.active_kv_tokens, sum(contexts) // n, shape.total_kv_tokens)
        decode_ms = scaled_ms(raw, shape.decode_speedup)
    return prefill_ms + decode_ms
