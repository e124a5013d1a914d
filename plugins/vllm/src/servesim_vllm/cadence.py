"""vLLM 0.33's local prefill cadence (``engine.vllm.local_prefill_cadence``).

With ``prefill_schedule_interval = N > 1`` on an engine without data parallelism, vLLM 0.33's
``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``) holds prefill back so decode runs
in longer stretches:

* it counts *executed* steps (steps that schedule any token) and stamps ``last_prefill_step``
  with the count of every step that carried prefill — a running request's chunk or an
  admission with more than its last token to compute; the first step is never held;
* a step is *held* when fewer than N executed steps would separate it from the last prefill
  (``executed + 1 − last < N``) and some running request is decoding (not mid-prefill);
* a held step skips running requests that are mid-prefill and admits no waiting request
  except one whose only token to compute is its last;
* the capacity rule: a step that was not held records whether requests were still waiting
  after it (when the waiting scan ran, i.e. nothing was preempted); while that holds no step
  is held, so the cadence stays off until the queue drains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim_vllm.request import VllmRequest


class Cadence:
    """The counters of one rank; ``held`` is the current pass's decision."""

    __slots__ = ("interval", "executed", "last_prefill", "capacity_bound", "held", "carried")

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.executed = 0
        self.last_prefill = -interval  # a full interval back: the first step is never held
        self.capacity_bound = False
        self.held = False
        self.carried = False  # this pass carried prefill

    def begin(self, running: list[VllmRequest]) -> None:
        self.carried = False
        self.held = (
            not self.capacity_bound
            and (self.executed + 1) - self.last_prefill < self.interval
            and any(not mid_prefill(r) for r in running)
        )

    def after_waiting_scan(self, waiting_left: int) -> None:
        if not self.held:
            self.capacity_bound = waiting_left > 0

    def end(self, scheduled_tokens: bool) -> None:
        if scheduled_tokens:
            self.executed += 1
        if self.carried:
            self.last_prefill = self.executed


def mid_prefill(req: VllmRequest) -> bool:
    """vLLM's ``is_prefill_chunk``: the request's last step left prompt (or, after a
    preemption, known) tokens uncomputed; a decoding request has one sampled token left."""
    return req.computed < req.length - 1
