"""The core and the rank as their helper modules see them.

``TrtCore`` (servesim_trtllm.core) holds one rank's requests and pool; helpers that do one
part of a step take it, and the handoff adapter takes the rank. Each helper types what it
takes by this module's named interfaces, :class:`CoreView` and :class:`RankView`, so that no
helper imports the core's or the rank's module: they import their helpers, never the other
way round (tests/qa/test_import_cycles.py). The fast paths extend the view with the steady
batch (servesim_trtllm.fast.steady.SteadyCore).

These are :class:`typing.Protocol` classes: ``TrtCore`` and ``TrtllmRank`` match them by their
members and inherit nothing from them. The capacity policies (servesim_trtllm.policies) are
the core's own step and take ``TrtCore`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from servesim.config.engine import EngineConfig
    from servesim.contract import Metrics, OutputBatch, Request, RequestId
    from servesim.kv.pool import BlockPool
    from servesim.timing.base import TimingModel

    from servesim_trtllm.config import Limits
    from servesim_trtllm.queue_sums import QueueSums
    from servesim_trtllm.request import TrtRequest


class CoreView(Protocol):
    """One rank's ``TrtCore``: its configuration, requests and pool, and the request
    lifecycle steps its helpers repeat."""

    # configuration
    config: EngineConfig
    limits: Limits
    timing: TimingModel
    bs: int
    num_blocks: int
    capacity_tokens: int
    native: bool  # a native capacity policy (not guaranteed-no-evict)
    # requests and KV
    pool: BlockPool
    reqs: dict[RequestId, TrtRequest]
    waiting: dict[RequestId, TrtRequest]
    running: dict[RequestId, TrtRequest]
    queued_prefill: QueueSums
    queued_decode: QueueSums
    reserved: int  # Σ over running requests of the blocks they still need to finish
    book: Any  # servesim.mechanics.handoff.HandoffBook, set by the rank

    def submit(self, request: Request) -> TrtRequest: ...

    def remove(self, r: TrtRequest) -> None: ...

    def unqueue(self, r: TrtRequest) -> None:
        """Take a request leaving the waiting queue out of the queue statistics."""
        ...

    def finalize(self, r: TrtRequest, upto: int) -> None:
        """Make ``r``'s first ``upto`` blocks cache-visible (``BlockPool.finalize``)."""
        ...

    def finalize_through(self, r: TrtRequest, upto: int) -> None: ...

    def reserved_available(self) -> int: ...

    def fresh_blocks_needed(self, r: TrtRequest) -> tuple[int, int, int]: ...

    def sync(self) -> None: ...

    def finish(self, r: TrtRequest, out: OutputBatch) -> None: ...


class RankView(Protocol):
    """One ``TrtllmRank`` as its handoff adapter sees it."""

    @property
    def core(self) -> CoreView: ...

    def metrics(self) -> Metrics | None: ...


__all__ = ["CoreView", "RankView"]
