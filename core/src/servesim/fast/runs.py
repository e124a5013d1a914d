"""Runs of passes: a rank may commit k consecutive decode passes in one call (docs/architecture.md, "Speed by design").

Between external events nothing can change a steady decode-only batch except what the rank
itself foresees (a request reaching its output length, a block boundary needing a block,
memory running out). :meth:`servesim.fast.rank_runs.RunsOfPasses.execute_run` lets a rank commit such a *run*:

* pass 0 starts at ``now``; pass ``j + 1`` starts at pass ``j``'s end;
* every pass starts strictly before ``horizon_ms`` — the driver's next external event that
  could reach the engine (a driver delivers events due at or before a pass's start before
  starting it, so an event at the horizon lands inside the run's last pass, or right after it
  when it coincides with its end, exactly as when stepping);
* the run stops at the first pass whose batch would differ from the steady batch (possible
  admission, prefill chunk, preemption, an allocation that could fail); a pass that completes
  requests may be the run's *last* pass. When the driver allows it (``through_completions``:
  a completion can release no work, e.g. no next session turn) and nothing waits, a run may
  also continue through completions: a request completed at pass ``j < k - 1`` simply stops
  emitting, and its completion is known when the run starts (``RankRun.completed_at``), so a
  driver can deliver it at its own boundary before any later event.

:class:`RunEffects` carry the k passes' effects compactly; :func:`expand` turns them into the k
:class:`servesim.contract.PassCompletionEffects` the stepping path would have produced, which
is how tests prove the two paths identical. A rank that does not declare
:class:`~servesim.fast.rank_runs.RunsOfPasses`, or whose ``execute_run`` returns None, is
stepped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from attrs import define, field, frozen

from servesim.contract import (
    Admission,
    ForwardPassMetrics,
    KvEvent,
    Metrics,
    OutputBatch,
    PassCompletionEffects,
    RequestId,
)

# What a rank keeps of a committed run, the contract check and the pricing of steady passes:
# plain classes and functions, compiled in the compiled build (this module's attrs classes
# stay interpreted); importable from here as before.
from servesim.fast.run_pending import (
    BlockRunPending,
    RunPending,
    check_run,
    pass_gaps,
    price_decode_chunks,
    take_run_kv_events,
)


@frozen(slots=True)
class RankRun:
    """What a rank returns when it commits a run; ``pending`` goes back to ``complete_run``.

    ``pass_ends[j]`` is pass ``j``'s modelled end; pass 0 started at ``started_at_ms``.
    """

    started_at_ms: float
    pass_ends: tuple[float, ...]
    pending: Any
    # (pass index j < k - 1, request id) of requests completed before the run's last pass, in
    # stepping's order (pass, then batch order). Commands during the run cannot change them.
    completed_at: tuple[tuple[int, RequestId], ...] = ()
    # The requests emitting a token at every pass (until their completion), in batch order;
    # () when the rank does not say (drivers that need them then see no run tokens early).
    members: tuple[RequestId, ...] = ()
    # Requests the first pass admitted (its PassStartEffects.admissions), which join the
    # members at once: their first token is at pass 0 (a handoff destination, activated
    # with its prompt KV resident, needs no prefill).
    admissions: tuple[Admission, ...] = ()

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def end_ms(self) -> float:
        return self.pass_ends[-1]


@define(slots=True)
class RunEffects:
    """The completion effects of a run of ``k = len(pass_ends)`` passes.

    * ``members``: requests that emitted one token at every pass, in batch order;
    * ``absent_last``: members that emitted no token at the last pass (a command issued while
      the last pass was in flight suppressed it), in batch order;
    * ``completed``: requests completed at the last pass (their last token is in it);
    * ``completed_before``: pass index ``j < k - 1`` -> members completed at pass ``j`` (their
      last token is at pass ``j``; they emit nothing later), in batch order;
    * ``kv_events``: pass index -> the KV events released at that pass's end;
    * ``forward_pass_metrics``: one per pass when the rank captures them, else None;
    * ``pass_metrics``: the occupancy snapshot each pass's completion would report
      (``pass_metrics[-1]`` is the final one);
    * ``lifecycle_events``: handoff lifecycle events of the last pass's boundary
      (``HandoffBook.at_run_end``).
    """

    started_at_ms: float
    pass_ends: list[float]
    members: list[RequestId]
    absent_last: list[RequestId] = field(factory=list)
    completed: list[RequestId] = field(factory=list)
    kv_events: dict[int, list[KvEvent]] = field(factory=dict)
    # A list, or a servesim.fast.fpm_runs.FpmRun (the vLLM runs' metrics by column)
    forward_pass_metrics: Sequence[ForwardPassMetrics] | None = None
    completed_before: dict[int, list[RequestId]] = field(factory=dict)
    # The first pass's OutputBatch.cached_tokens (of the requests it admitted).
    cached_tokens: dict[RequestId, int] = field(factory=dict)
    # Built on first use: drivers rarely read per-pass occupancy.
    pass_metrics_factory: Callable[[], list[Metrics]] | None = None
    _pass_metrics: list[Metrics] | None = field(default=None, init=False)
    lifecycle_events: list[Any] = field(factory=list)

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def pass_metrics(self) -> list[Metrics] | None:
        if self._pass_metrics is None and self.pass_metrics_factory is not None:
            self._pass_metrics = self.pass_metrics_factory()
        return self._pass_metrics

    @property
    def metrics(self) -> Metrics | None:
        pm = self.pass_metrics
        return pm[-1] if pm else None


def expand(run: RunEffects) -> list[PassCompletionEffects]:
    """The per-pass effects the stepping path would have released for this run."""
    k = run.num_passes
    absent = set(run.absent_last)
    gone: set[RequestId] = set()
    out = []
    for j in range(k):
        last = j == k - 1
        tokens = [r for r in run.members if r not in gone] if gone else list(run.members)
        if last and absent:
            tokens = [r for r in tokens if r not in absent]
        done = list(run.completed) if last else list(run.completed_before.get(j, ()))
        gone.update(done)
        batch = OutputBatch(token_request_ids=tokens, completed=done,
                            cached_tokens=dict(run.cached_tokens) if j == 0 else {})
        eff = PassCompletionEffects(outputs=batch, kv_events=list(run.kv_events.get(j, ())))
        if last and run.lifecycle_events:
            eff.lifecycle_events = list(run.lifecycle_events)
        pm = run.pass_metrics
        if pm is not None:
            eff.metrics = pm[j]
        if run.forward_pass_metrics is not None:
            eff.forward_pass_metrics = run.forward_pass_metrics[j]
        out.append(eff)
    return out


@frozen(slots=True)
class EngineRunStarted:
    """A run committed by an engine: pass ids ``first_pass_id .. first_pass_id + k - 1``."""

    first_pass_id: int
    started_at_ms: float
    pass_ends: tuple[float, ...]
    completed_at: tuple[tuple[int, RequestId], ...] = ()  # as RankRun.completed_at
    members: tuple[RequestId, ...] = ()  # as RankRun.members
    admissions: tuple[Admission, ...] = ()  # as RankRun.admissions

    @property
    def num_passes(self) -> int:
        return len(self.pass_ends)

    @property
    def end_ms(self) -> float:
        return self.pass_ends[-1]


@frozen(slots=True)
class EngineRunCompleted:
    """A released run (dp_size 1: the single rank's effects)."""

    first_pass_id: int
    effects: RunEffects



__all__ = [
    "price_decode_chunks",
    "BlockRunPending",
    "RunPending",
    "take_run_kv_events",
    "EngineRunCompleted",
    "EngineRunStarted",
    "RankRun",
    "RunEffects",
    "check_run",
    "expand",
    "pass_gaps",
]
