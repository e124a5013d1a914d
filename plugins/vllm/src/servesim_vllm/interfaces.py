"""The scheduler and the rank as their helper modules see them.

``VllmScheduler.run_pass`` (servesim_vllm.scheduler) hands itself to helpers that do one part
of the pass: ``handoff`` (prebuilt admission, the handoff adapter), ``host_offload`` (the
host KV tier), ``shape`` (pass-shape pricing) and ``speculative`` (bursts). Each helper takes
the scheduler as a :class:`SchedulerView`, this module's named interface of what it may read
and call, so that no helper imports the scheduler's module: the scheduler imports its
helpers, never the other way round (tests/qa/test_import_cycles.py). The fast paths extend the
view with the steady batch (servesim_vllm.fast.steady.SteadyScheduler).

These are :class:`typing.Protocol` classes: ``VllmScheduler`` and ``VllmRank`` match them by
their members and inherit nothing from them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections import deque

    from servesim.config.engine import EngineConfig
    from servesim.contract import Metrics, Request, RequestId
    from servesim.kv.pool import BlockPool
    from servesim.mechanics.speculative import Speculation
    from servesim.timing.base import TimingModel
    from servesim.timing.pricing import ShapePricer

    from servesim_vllm.behaviour import Behaviour
    from servesim_vllm.cadence import Cadence
    from servesim_vllm.lora import VllmLora
    from servesim_vllm.pass_result import PassResult
    from servesim_vllm.priority import PriorityWaiting
    from servesim_vllm.request import VllmRequest


class SchedulerView(Protocol):
    """One rank's ``VllmScheduler``: its configuration, queues and pool, the state of the pass
    being built, and the steps of the pass its helpers repeat."""

    # configuration
    cfg: EngineConfig
    bs: int
    beh: Behaviour
    timing: TimingModel
    shapes: ShapePricer | None
    usable_blocks: int
    caching: bool
    token_ids_in_events: bool
    lazy_hashes: bool
    max_seqs: int
    max_tokens: int
    spec: Speculation | None
    cadence: Cadence | None
    by_priority: PriorityWaiting | None  # the waiting queue too, under the priority policy
    lora: VllmLora | None  # max_loras and the adapter cache, None while LoRA is off
    # queues and KV
    pool: BlockPool
    requests: dict[RequestId, VllmRequest]
    waiting: deque[VllmRequest] | PriorityWaiting
    running: list[VllmRequest]
    book: Any  # servesim.mechanics.handoff.HandoffBook, attached by the rank
    queued_prefill: list[int]
    queued_decode: list[int]
    # the pass being built (valid inside run_pass)
    now: float
    budget: int
    result: PassResult
    preempted_in_pass: bool

    def cancel(self, rid: RequestId) -> bool: ...

    def queue_stats(self, req: VllmRequest, sign: int) -> None:
        """Count ``req`` into (``sign`` +1) or out of (-1) the queued-request statistics."""
        ...

    def impossible(self, req: VllmRequest) -> bool:
        """Whether ``req`` can never fit the pool (it is then rejected at the queue head)."""
        ...

    def prefill_cost(self, req: VllmRequest) -> tuple[int, int]:
        """``(cached, active_cached)`` prompt tokens of ``req``'s prefix-cache hit."""
        ...

    def admit_remote(self, req: VllmRequest) -> None: ...

    def finalize_blocks(self, req: VllmRequest, full: int) -> None: ...

    def victim(self) -> VllmRequest | None: ...

    def preempt(self, victim: VllmRequest) -> None: ...

    def decode_time(self, res: PassResult, decoders: int, kv_sum: int) -> None: ...

    def finish(self, req: VllmRequest, res: PassResult) -> None: ...


class RankView(Protocol):
    """One ``VllmRank`` as its handoff adapter sees it."""

    @property
    def sched(self) -> SchedulerView: ...

    def enqueue(self, request: Request) -> None: ...

    def metrics(self) -> Metrics | None: ...


__all__ = ["RankView", "SchedulerView"]
