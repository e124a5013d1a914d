"""The scheduler and the rank as their helper modules see them.

``SglangScheduler.run_pass`` (servesim_sglang.scheduler) hands itself to helpers that do one
part of the pass: ``admission`` (SGLang 0.5.23's prefill admission), ``retraction`` (the
decode memory check), ``overlap`` (the overlap loop) and ``speculative`` (bursts); the rank
hands itself to its handoff adapter. Each helper types what it takes by this module's named
interfaces, :class:`SchedulerView` and :class:`RankView`, so that no helper imports the
scheduler's or the rank's module: they import their helpers, never the other way round
(tests/qa/test_import_cycles.py). The runs of passes extend the rank's view
(servesim_sglang.fast.runs.RunRank).

:class:`SchedulerView` and :class:`RankView` are :class:`typing.Protocol` classes:
``SglangScheduler`` and ``SglangRank`` match them by their members and inherit nothing from
them. :class:`RankCounters` is a small state object the rank holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from attrs import define, field

if TYPE_CHECKING:
    from collections import deque

    from servesim.config.engine import EngineConfig
    from servesim.contract import CommandEffects, Metrics, Submit
    from servesim.rank import CommandContext
    from servesim.timing.base import TimingModel

    from servesim_sglang.config import SchedulerParams
    from servesim_sglang.pass_outcome import PassOutcome
    from servesim_sglang.policies import SchedulePolicy
    from servesim_sglang.radix_cache import RadixCache
    from servesim_sglang.request import SglangRequest


@define
class RankCounters:
    """The rank's passes so far, and the requests it rejected that have not yet been
    reported (``SglangRank.counters``)."""

    passes: int = 0
    rejected: list[int] = field(factory=list)


class SchedulerView(Protocol):
    """One rank's ``SglangScheduler``: its parameters, queues and radix cache, the
    ``new_token_ratio`` state, and the steps of the pass its helpers repeat."""

    p: SchedulerParams
    cache: RadixCache
    policy: SchedulePolicy
    timing: TimingModel
    speedup: float
    decode_speedup: float
    spec: Any  # servesim.mechanics.speculative.Speculation, None when off
    shapes: Any  # servesim.timing.pricing.ShapePricer, None for the two-method models
    overlap: bool  # SGLang's overlap loop (servesim_sglang.overlap)
    mix: bool  # SGLang's mixed chunk (servesim_sglang.mixed)
    waiting: deque[SglangRequest]
    waiting_version: int  # bumped whenever membership of ``waiting`` changes
    running: list[SglangRequest]
    ratio: float  # SGLang's new_token_ratio
    retractions_total: int
    retracted_ids: set[int]  # retracted requests not yet readmitted
    cache_decode: bool  # decode tokens enter the tree every pass (not at finish)
    batch_full: bool
    prefix_refresh_calls: int
    # (request, chunk end or -1, from a prefill) per token: this pass's and the last pass's
    results: list[tuple[SglangRequest, int, bool]]
    pending_results: list[tuple[SglangRequest, int, bool]]
    # requests whose token in flight a preemption dropped, by id (servesim_sglang.overlap)
    echoes: dict[int, SglangRequest]

    def run_pass(self, now: float) -> PassOutcome: ...

    def enqueue(self, req: SglangRequest) -> None:
        """Add a request at the back of the waiting queue."""

    def order_waiting(self, chunk_first: bool) -> None:
        """Sort the waiting queue by the schedule policy."""
        ...

    def emit(self, req: SglangRequest, out: PassOutcome) -> None: ...

    def complete(self, req: SglangRequest, out: PassOutcome, rejected: bool = False) -> None: ...

    def report_done(self, req: SglangRequest, out: PassOutcome) -> None: ...

    def release_done(self, req: SglangRequest, out: PassOutcome, rejected: bool = False) -> None: ...

    def split_prompt(self, r: SglangRequest, upto: int) -> None: ...

    def growth_pages(self, running: list[SglangRequest]) -> int:
        """Pages the running requests' next decode step needs."""
        ...


class RankView(Protocol):
    """One ``SglangRank`` as its handoff adapter sees it."""

    config: EngineConfig
    params: SchedulerParams
    cache: RadixCache
    requests: dict[int, SglangRequest]
    book: Any  # servesim.mechanics.handoff.HandoffBook

    @property
    def sched(self) -> SchedulerView: ...

    def submit(self, command: Submit, ctx: CommandContext) -> CommandEffects:
        """``Rank.apply`` for a ``Submit`` command."""
        ...

    def drop(self, rid: int) -> None: ...

    def metrics(self, hit_tokens: int = 0, total_tokens: int = 0) -> Metrics: ...


__all__ = ["RankCounters", "RankView", "SchedulerView"]
