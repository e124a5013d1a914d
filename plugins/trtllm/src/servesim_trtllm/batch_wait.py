"""TensorRT-LLM's batch waiting: new contexts held back while generation runs.

``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio`` (``TorchLlmArgs``, both off
by default) make the PyTorch executor hold a step's context requests back so that more of
them gather into one context batch (``PyExecutor._waiting_requests`` and ``_schedule`` in
``tensorrt_llm/_torch/pyexecutor/py_executor.py``):

* the check runs only in a step that schedules both context and generation requests, and
  never with attention DP;
* the step's tokens are the context requests' whole token counts (``get_tokens(0)``) plus
  one per generation request;
* waiting stops when ``iters >= batch_wait_timeout_iters`` or ``tokens >=
  batch_wait_max_tokens_ratio * max_num_tokens``: the contexts run and the counter resets;
  otherwise the step runs its generation requests alone and the counter grows by one.

With either setting at 0 the stop condition always holds (``iters >= 0``, ``tokens >= 0``),
so waiting needs both. InferenceMAX's Llama-3.1-70B TensorRT-LLM launch scripts (InferenceX
``benchmarks/70b_fp8_b200_trt_slurm.sh``, ``70b_fp8_h200_trt_slurm.sh``,
``70b_fp4_b200_trt_slurm.sh``) set 20 iterations and 0.9 for 1k/1k runs below TP 8: each new
request then waits about 20 decode steps before its context runs.

servesim asks the question before scheduling: the context requests are the running requests
still in their context plus the queue's head requests the step could start (FIFO, within
``max_batch_size`` and the token budget left after one token per generation request; without
chunked context a prompt that does not fit ends the walk, as the micro-batch scheduler's;
the capacity scheduler's KV check is not repeated, so a head it would refuse still counts).
A held step hides the queue; a context already in progress (chunked context) keeps running,
where TensorRT-LLM would hold it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim_trtllm.config import TrtllmConfig
    from servesim_trtllm.core import TrtCore


class BatchWait:
    """One rank's batch-waiting state (the executor's ``batch_wait_iters_count``)."""

    def __init__(self, timeout_iters: int, max_tokens_ratio: float) -> None:
        self.timeout_iters = timeout_iters
        self.max_tokens_ratio = max_tokens_ratio
        self.iters = 0

    @classmethod
    def build(cls, trt: TrtllmConfig, dp_size: int) -> BatchWait | None:
        """The state, or None where TensorRT-LLM never waits (either setting 0, attention DP)."""
        if trt.batch_wait_timeout_iters <= 0 or trt.batch_wait_max_tokens_ratio <= 0 or dp_size > 1:
            return None
        return cls(trt.batch_wait_timeout_iters, trt.batch_wait_max_tokens_ratio)

    def holds(self, core: TrtCore) -> bool:
        """Whether this step's contexts wait (and count the step), from the requests' state
        before scheduling."""
        running = core.running
        n_gen = 0
        n_ctx = 0
        tokens = 0
        if core.steady is not None and core.steady.m == len(running):
            n_gen = len(running)  # a steady batch holds plain decodes only
        else:
            core.sync()
            for r in running.values():
                if r.num_computed >= r.ctx_len:
                    n_gen += 1
                else:
                    n_ctx += 1
                    tokens += r.seq_len
        if n_gen == 0:
            return False
        limits = core.limits
        limit = limits.max_num_tokens
        budget = float("inf") if limit is None else float(limit - n_gen)
        slots = float("inf") if limits.max_batch_size is None else float(limits.max_batch_size - len(running))
        for r in core.waiting.values():
            if slots <= 0 or budget <= 0:
                break
            size = r.seq_len
            if size > budget and not limits.chunked_context:
                break
            n_ctx += 1
            tokens += size
            budget -= size
            slots -= 1
        if n_ctx == 0:
            return False
        total = tokens + n_gen
        cap = float("inf") if limit is None else self.max_tokens_ratio * limit
        if self.iters >= self.timeout_iters or total >= cap:
            self.iters = 0
            return False
        self.iters += 1
        return True
