"""Disaggregated replay fed arrivals as they come (``servesim serve`` with a prefill/decode split).

:class:`LiveDisaggReplayer` is a :class:`~servesim.replay.disagg.DisaggReplayer` whose
workload starts empty: :meth:`LiveDisaggReplayer.add` appends a request (every per-request
record grows by one slot, the log's through ``RequestLog.append_request``),
:meth:`~LiveDisaggReplayer.arrive` schedules its arrival, :meth:`~LiveDisaggReplayer.cancel`
its cancellation, and :meth:`~LiveDisaggReplayer.advance`
does everything due up to a time in the replay's order (``Replayer._step``: pass ends, then
handoff events, internal work, arrivals, new passes). The handoff, the routers and the
report extras are the batch replayer's own. It always steps (no runs of passes), so a
request's tokens are logged at the end of the pass that produced them, and a
:class:`LiveListener` hears them there, per decode rank, before the pass's own publication.
Given a trace's arrivals it logs what ``servesim run`` logs for the trace
(plugins/serve/tests/test_disagg_live.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from servesim.contract import HandoffId, PassCompletionEffects
from servesim.replay.disagg import CANCEL, DisaggReplayer
from servesim.replay.driver import ARRIVAL, EXTERNAL
from servesim.tokens import TokenSeq
from servesim.workload.model import Turn, Workload


class LiveListener:
    """What a :class:`LiveDisaggReplayer` tells its driver; every hook does nothing here."""

    def tokens(self, rid: int, count: int, now: float) -> None:
        """Request ``rid`` got ``count`` tokens from a decode pass ending at ``now``."""

    def ended(self, rid: int, now: float) -> None:
        """Request ``rid`` ended at ``now``: completed, failed or cancelled."""

    def pass_completed(self, w: int, dp_rank: int, eff: PassCompletionEffects) -> None:
        """A pass of worker ``w``'s rank ``dp_rank`` completed (after its tokens were told)."""

    def preempted(self, w: int, dp_rank: int, count: int) -> None:
        """``count`` requests were preempted on worker ``w``'s rank ``dp_rank``."""


class LiveDisaggReplayer(DisaggReplayer):
    """A :class:`DisaggReplayer` over requests added while it runs (module docstring).
    Takes DisaggReplayer's arguments but the workload (it starts empty) and ``runs``."""

    def __init__(self, prefill_engines: Sequence[Any], decode_engines: Sequence[Any],
                 workload: Workload | None = None, **kwargs: Any) -> None:
        kwargs["runs"] = False
        super().__init__(prefill_engines, decode_engines, Workload(()), **kwargs)
        self.listener = LiveListener()
        self.receipt: list[float] = []  # per request: the time it was received
        self._told = self.log.ntok[:]  # tokens told to the listener, per request
        self._slots: list[dict[int, None]] = [{} for _ in range(len(decode_engines) * self.state.dp_size)]
        self._slot_of: dict[int, int] = {}

    # -- feeding it -------------------------------------------------------------------------

    def add(self, prompt: TokenSeq, output_length: int, lora: int = 0) -> int:
        """A new request (not yet arrived; ``lora``: its LoRA adapter id); returns its id."""
        rid = len(self.turns)
        self.turns.append(Turn(rid, prompt, output_length, lora=lora))
        self.session_of.append(str(rid))
        self.session_index.append(rid)
        self.next_turn.append(-1)
        self.log.append_request(len(prompt))
        for times in self.times.values():
            times.append(-1.0)
        for floats in (self.transfer_ms, self.receipt):
            floats.append(-1.0)
        for ints, value in ((self.prefill_worker, -1), (self.prefill_dp, 0),
                            (self.decode_worker, -1), (self.decode_dp, 0), (self._told, 0)):
            ints.append(value)
        self._hid.append(HandoffId(rid))
        return rid

    def arrive(self, rid: int, at: float, received: float | None = None) -> None:
        """Request ``rid`` reaches the prefill router at ``at`` (not before the last time
        advanced to); its logged arrival is ``received`` (default ``at``), e.g. a server's
        receipt that came before a moment it has already acted on."""
        self.receipt[rid] = at if received is None else min(received, at)
        self.push_event(at, ARRIVAL, rid)

    def cancel(self, rid: int, at: float) -> None:
        """Cancel request ``rid`` at ``at``, wherever it is then (prefill, transfer, decode)."""
        self.push_event(at, EXTERNAL, rid, CANCEL)

    def advance(self, until: float) -> None:
        """Everything due by ``until``, one simulated time after another."""
        heap = self._heap
        while heap and heap[0][0] <= until:
            ev = heapq.heappop(heap)
            self.now = ev[0]
            self._step(ev, ev[0], self.has_deadlines)

    def next_event_ms(self) -> float | None:
        """The time of the earliest pending event (a pass end, a deadline, a transfer)."""
        return self._heap[0][0] if self._heap else None

    # -- hooks into the replay ----------------------------------------------------------------

    def _submit(self, rid: int, now: float) -> None:
        super()._submit(rid, now)
        self.log.arrival[rid] = self.receipt[rid]

    def _reserve(self, rid: int, now: float) -> None:
        super()._reserve(rid, now)
        w = self.decode_worker[rid]
        if w >= 0 and self.log.done[rid] < 0:
            slot = self.state.slot(w - self.num_prefill, self.decode_dp[rid])
            self._slots[slot][rid] = None
            self._slot_of[rid] = slot

    def _publish_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> bool:
        if w >= self.num_prefill:
            slot = self.state.slot(w - self.num_prefill, dp_rank)
            for rid in self._slots[slot]:
                self._tell(rid, now)
        busy = super()._publish_pass(w, dp_rank, eff, now)
        self.listener.pass_completed(w, dp_rank, eff)
        return busy

    def _tell(self, rid: int, now: float) -> None:
        count = self.log.ntok[rid] - self._told[rid]
        if count:
            self._told[rid] += count
            self.listener.tokens(rid, count, now)

    def finish_request(self, rid: int, now: float) -> None:
        self._tell(rid, now)
        slot = self._slot_of.pop(rid, None)
        if slot is not None:
            del self._slots[slot][rid]
        super().finish_request(rid, now)
        self.listener.ended(rid, now)

    def _preempted(self, w: int, dp_rank: int, now: float, count: int) -> None:
        super()._preempted(w, dp_rank, now, count)
        self.listener.preempted(w, dp_rank, count)


__all__ = ["LiveDisaggReplayer", "LiveListener"]
