"""Each backend's default terms, and where each comes from.

Structure (which terms exist and which overlap) comes from the engines' sources; the two
per-step CPU constants cannot be read from source and were fitted (see FITTED below).

* ``overlap``: does the CPU work of step k+1 (scheduling, input preparation, sampling
  bookkeeping, output processing) run while the GPU computes step k? SGLang's overlap
  scheduler does by default (``sglang/srt/managers/scheduler.py``,
  ``event_loop_overlap``; ``--disable-overlap-schedule`` turns it off); so does TRT-LLM's
  PyTorch executor (``tensorrt_llm/_torch/pyexecutor/py_executor.py``,
  ``_executor_loop_overlap``, on unless ``disable_overlap_scheduler``). vLLM's V1 engine runs
  them one after the other unless ``--async-scheduling`` is set
  (``vllm/config/scheduler.py``, ``async_scheduling``; ``vllm/v1/engine/core.py``
  ``step`` vs ``step_with_batch_queue``), which the benchmark servers did not set.
* ``cuda_graph_padding``: decode batches are padded to a captured size in vLLM and SGLang,
  not in TRT-LLM (:mod:`servesim_overhead.cuda_graphs`).
* ``mixed``: a pass with prefill chunks and decode requests is one forward pass in all three
  engines (vLLM V1's unified token batch, ``vllm/v1/core/sched/scheduler.py``; SGLang's mixed
  chunked prefill; TRT-LLM's in-flight batching), so its weights are read once: ``fused``
  prices it with AIConfigurator's ``mixed_step_latency`` when the inner model is ``aic``.
"""

from __future__ import annotations

from attrs import frozen


@frozen
class BackendDefaults:
    step_ms: float
    per_request_ms: float
    prefill_ms_per_layer: float
    overlap: bool
    cuda_graph_padding: bool
    mixed: str


# FITTED: step_ms and per_request_ms, to the mean TPOT of the silicon sample's agg rows (OSL
# <= 1024, concurrency <= 256) of the fitting half of the models (MiniMax-M2.5, Qwen3-32B,
# DeepSeek-R1, Llama-3.1-70B, Kimi-K2.5, gpt-oss-120b), replayed with both at zero under each
# row's client, launch settings and engine loop (benchmarks/silicon.py --half fit; 1,366 of
# the 1,847 rows priced), by benchmarks/silicon_fit.py (servesim_overhead.fit). The held-out
# half's figures are in docs/fidelity.md. SGLang's pair rests on 84 rows of one model on one
# GPU (Qwen3-32B on H100): AIConfigurator cannot price the other fitting-half models' SGLang
# rows.
DEFAULTS = {
    "vllm": BackendDefaults(step_ms=0.3, per_request_ms=0.016, prefill_ms_per_layer=0.0, overlap=False,
                            cuda_graph_padding=True, mixed="fused"),
    "sglang": BackendDefaults(step_ms=6.9, per_request_ms=0.068, prefill_ms_per_layer=0.0, overlap=True,
                              cuda_graph_padding=True, mixed="fused"),
    "trtllm": BackendDefaults(step_ms=3.4, per_request_ms=0.03, prefill_ms_per_layer=0.0, overlap=True,
                              cuda_graph_padding=False, mixed="fused"),
}
GENERIC = BackendDefaults(step_ms=0.0, per_request_ms=0.0, prefill_ms_per_layer=0.0, overlap=False,
                          cuda_graph_padding=False, mixed="sum")


def for_backend(backend: str) -> BackendDefaults:
    return DEFAULTS.get(backend, GENERIC)
