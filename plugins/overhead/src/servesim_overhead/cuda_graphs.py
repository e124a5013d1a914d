"""Decode batch sizes the backends capture CUDA graphs for, by default.

A decode pass of ``n`` requests replays the smallest captured graph of at least ``n``
requests, so the GPU computes ``padded(n)`` rows; a batch above the largest capture runs
without a graph, unpadded.

* vLLM (``vllm/config/vllm.py``, ``VllmConfig._set_cudagraph_sizes``, v0.32):
  ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with
  ``max = min(2 * max_num_seqs, 512)`` (1024 on data-centre Blackwell);
* SGLang (``sglang/srt/model_executor/cuda_graph_runner.py``,
  ``get_batch_sizes_to_capture``): ``[1, 2, 4, 8] + range(16, 161, 8)``, plus
  ``range(160, 257, 8)`` on GPUs with more than 90 GB, capped at ``max_running_requests``;
* TRT-LLM (PyTorch backend, ``CudaGraphConfig``): ``enable_padding`` is off by default,
  so batches are not padded (the ``overhead`` model's default for TRT-LLM). With it on
  (``cuda_graph_padding: true``), ``CudaGraphConfig._generate_cuda_graph_batch_sizes``
  (``tensorrt_llm/llmapi/llm_args.py``) captures ``[1, 2, 4] + range(8, 129, 8)`` and the
  powers of two from 256 below ``cuda_graph_config.max_batch_size`` (128 when unset); taken
  here as the powers of two up to ``max_num_seqs``.
"""

from __future__ import annotations

from functools import cache

BLACKWELL_SYSTEMS = ("b200", "b300", "gb200", "gb300")


@cache
def capture_sizes(backend: str, max_num_seqs: int, large_gpu: bool, blackwell: bool) -> tuple[int, ...]:
    """The capture list a padded decode batch rounds up to (empty: the backend does not pad)."""
    if backend == "vllm":
        top = min(2 * max_num_seqs, 1024 if blackwell else 512)
        sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
        return tuple(s for s in sizes if s <= top)
    if backend == "sglang":
        sizes = [1, 2, 4, 8, *range(16, 161, 8)]
        if large_gpu:
            sizes += list(range(160, 257, 8))
        return tuple(sorted({s for s in sizes if s <= max(max_num_seqs, 1)}))
    if backend == "trtllm":
        sizes = [1, 2, 4, *range(8, 129, 8)]
        top = 256
        while top <= max_num_seqs:
            sizes.append(top)
            top *= 2
        return tuple(sizes)
    return ()


def padded(n: int, sizes: tuple[int, ...]) -> int:
    """The batch a graph replay computes for ``n`` requests (``n`` itself above the list)."""
    for s in sizes:
        if s >= n:
            return s
    return n
