"""Disaggregated replay fed arrivals as they come (``servesim serve`` with a prefill/decode split).

:class:`LiveDisaggReplayer` is a :class:`~servesim.replay.disagg.DisaggReplayer` whose
workload starts empty, fed as :class:`~servesim_serve.live_feed.LiveFeed` feeds a replayer:
:meth:`~LiveFeed.add` appends a request (the split's per-request records included,
:class:`LiveSplitFeed`), :meth:`~LiveFeed.arrive` schedules its arrival,
:meth:`~LiveSplitFeed.cancel` its cancellation, and :meth:`~LiveFeed.advance`
does everything due up to a time in the replay's order (``Replayer._step``: pass ends, then
handoff events, internal work, arrivals, new passes). The handoff, the routers and the
report extras are the batch replayer's own. It always steps (no runs of passes), so a
request's tokens are logged at the end of the pass that produced them, and a
:class:`LiveListener` hears them there, per decode rank, before the pass's own publication.
Given a trace's arrivals it logs what ``servesim run`` logs for the trace
(plugins/serve/tests/test_disagg_live.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract import HandoffId, PassCompletionEffects
from servesim.replay.disagg import CANCEL, DisaggReplayer
from servesim.replay.driver import EXTERNAL
from servesim.workload.model import Workload

from servesim_serve.live_feed import LiveFeed, LiveListener


class LiveSplitFeed(LiveFeed):
    """The live feeding of a split's replayer: its per-request records, the time a request
    was received as its logged arrival, and a cancellation wherever the request is."""

    # Declared for the type checker: the split replayer's own state.
    times: dict[str, list[float]]
    transfer_ms: list[float]
    prefill_worker: list[int]
    prefill_dp: list[int]
    decode_worker: list[int]
    decode_dp: list[int]
    _hid: list[HandoffId]

    def add_columns(self, rid: int) -> None:
        super().add_columns(rid)
        for times in self.times.values():
            times.append(-1.0)
        self.transfer_ms.append(-1.0)
        for ints, value in ((self.prefill_worker, -1), (self.prefill_dp, 0),
                            (self.decode_worker, -1), (self.decode_dp, 0)):
            ints.append(value)
        self._hid.append(HandoffId(rid))

    def cancel(self, rid: int, at: float) -> None:
        """Cancel request ``rid`` at ``at``, wherever it is then (prefill, transfer, decode)."""
        self.push_event(at, EXTERNAL, rid, CANCEL)

    def _submit(self, rid: int, now: float) -> None:
        super()._submit(rid, now)  # type: ignore[misc]
        self.log.arrival[rid] = self.receipt[rid]


class LiveDisaggReplayer(LiveSplitFeed, DisaggReplayer):
    """A :class:`DisaggReplayer` over requests added while it runs (module docstring).
    Takes DisaggReplayer's arguments but the workload (it starts empty) and ``speed``."""

    def __init__(self, prefill_engines: Sequence[Any], decode_engines: Sequence[Any],
                 workload: Workload | None = None, **kwargs: Any) -> None:
        kwargs["speed"] = None  # it steps
        super().__init__(prefill_engines, decode_engines, Workload(()), **kwargs)
        self.init_feed()
        self._slots: list[dict[int, None]] = [{} for _ in range(len(decode_engines) * self.state.dp_size)]
        self._slot_of: dict[int, int] = {}

    # -- hooks into the replay ----------------------------------------------------------------

    def _reserve(self, rid: int, now: float) -> None:
        super()._reserve(rid, now)
        w = self.decode_worker[rid]
        if w >= 0 and self.log.done[rid] < 0:
            slot = self.state.slot(w - self.num_prefill, self.decode_dp[rid])
            self._slots[slot][rid] = None
            self._slot_of[rid] = slot

    def tell_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> None:
        """A decode pass tells every request reserved on its rank."""
        if w >= self.num_prefill:
            slot = self.state.slot(w - self.num_prefill, dp_rank)
            for rid in self._slots[slot]:
                self._tell(rid, now)

    def finish_request(self, rid: int, now: float) -> None:
        slot = self._slot_of.pop(rid, None)
        if slot is not None:
            del self._slots[slot][rid]
        super().finish_request(rid, now)


__all__ = ["LiveDisaggReplayer", "LiveListener", "LiveSplitFeed"]
