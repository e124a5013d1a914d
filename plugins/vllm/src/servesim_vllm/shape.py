"""A vLLM pass as a :class:`servesim.timing.shape.PassShape`, for a timing model that prices
whole passes (only then: the two-method path never builds one).

The shape lists what the scheduler's two timing calls count (servesim_vllm.scheduler,
``_prefill_time`` and ``_emit``): every request that computed prompt tokens this pass, as a
chunk after its cached or earlier-computed prefix, and every request the decode call prices,
with its length before this pass's token: the plain decoders and the requests with other work
that sampled after having generated (a re-prefilled request that already generated is in
both lists, as the decode call prices it too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract import WorkerType
from servesim.timing.shape import PrefillChunk

if TYPE_CHECKING:
    from servesim_vllm.interfaces import SchedulerView
    from servesim_vllm.pass_result import PassResult


def shaped_pass_ms(sched: SchedulerView, res: PassResult) -> tuple[float, bool]:
    """The pass's duration from the model's ``predict_pass_ms``, and whether it prefilled."""
    chunks = [
        PrefillChunk(w.prompt_tokens, w.prefix_tokens) for w in res.work.values() if w.prompt_tokens > 0
    ]
    work = res.work
    priced = res.priced or {}
    decode = []
    for req in res.order:
        rid = req.rid
        if rid not in work:
            decode.append(req.length - 1)  # a plain decoder: its token was sampled at scheduling
        elif rid in priced:
            decode.append(priced[rid])
    assert sched.shapes is not None
    total = sched.cfg.num_gpu_blocks * sched.bs
    ms = sched.shapes.price(chunks, decode, sum(decode), total)
    return ms, bool(chunks) and sched.cfg.worker_type is not WorkerType.DECODE
