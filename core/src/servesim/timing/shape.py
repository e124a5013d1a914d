"""A pass's full shape, for timing models that price whole passes (``predict_pass_ms``).

The two-method contract (``predict_prefill_ms`` / ``predict_decode_ms``) sees batch means.
A model that overrides :meth:`servesim.timing.base.TimingModel.predict_pass_ms` instead gets
a :class:`PassShape`: every request's prefill chunk (tokens computed, cached prefix, context
length) or decode context length, the worker's role, its dp rank, the backend, and the
engine's geometry. Backends build a shape only for such a model
(:func:`servesim.timing.pricing.prices_pass_shapes`), so every other model keeps its exact results at no cost.

docs/writing-a-plugin.md ("Timing models") says exactly which requests each backend lists,
and how each one prices a mixed pass through the two methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from servesim.contract import WorkerType

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig


@frozen
class EngineGeometry:
    """The engine a pass runs on (``engine:`` keys; None where the config leaves them unset).

    ``num_layers``, ``num_kv_heads``, ``head_dim`` and ``kv_dtype_bytes`` describe the model's
    KV cache (``kv_bytes_per_token`` is their product with 2 unless set directly);
    ``block_size`` is resolved to the backend's default.
    """

    num_layers: int | None
    num_kv_heads: int | None
    head_dim: int | None
    kv_dtype_bytes: float
    kv_bytes_per_token: float | None
    block_size: int
    num_gpu_blocks: int
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    dp_size: int

    @classmethod
    def of(cls, config: EngineConfig) -> EngineGeometry:
        from servesim.mechanics.handoff import kv_bytes_per_token

        return cls(
            num_layers=config.num_layers,
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
            kv_dtype_bytes=config.kv_dtype_bytes,
            kv_bytes_per_token=kv_bytes_per_token(config),
            block_size=config.bs,
            num_gpu_blocks=config.num_gpu_blocks,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            dp_size=config.dp_size,
        )


@frozen
class PrefillChunk:
    """One request's prompt work in a pass: ``tokens`` computed now, after ``cached_prefix``
    tokens that were computed in earlier passes or hit in the prefix cache."""

    tokens: int
    cached_prefix: int

    @property
    def context_length(self) -> int:
        """The request's computed length at the end of the pass."""
        return self.cached_prefix + self.tokens


@frozen
class PassShape:
    """Everything a pass does that its duration can depend on.

    * ``prefill``: the chunks the backend's prefill call counts, in batch order;
    * ``decode``: the context length of every request the decode call prices, in batch
      order (a vLLM request re-prefilled after preemption that already generated appears in
      both, as the backend prices it in both);
    * ``active_kv_tokens`` / ``total_kv_tokens``: the KV occupancy the backend passes its
      decode call (the decode contexts' sum; SGLang clamps it to the pool) and the pool's
      capacity in tokens;
    * ``speedup_ratio`` / ``decode_speedup``: the engine's speed-ups for prefill and for
      decode (``speedup_ratio * decode_speedup_ratio``), which the default pricing applies.
    """

    backend: str
    worker_type: WorkerType
    dp_rank: int
    geometry: EngineGeometry
    prefill: tuple[PrefillChunk, ...]
    decode: tuple[int, ...]
    active_kv_tokens: int
    total_kv_tokens: int
    speedup_ratio: float
    decode_speedup: float


__all__ = [
    "EngineGeometry",
    "PassShape",
    "PrefillChunk",
]
