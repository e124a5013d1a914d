"""What every replayer fed requests as they arrive shares (``servesim serve``).

:class:`LiveFeed` is a mixin over a :class:`~servesim.replay.driver.Replayer` whose workload
starts empty (servesim_serve.disagg_live, servesim_serve.elastic_live,
servesim_serve.elastic_split_live): :meth:`~LiveFeed.add` appends a request (every
per-request record grows by one slot, the log's through ``RequestLog.append_request``, a
replayer's own through :meth:`~LiveFeed.add_columns`), :meth:`~LiveFeed.arrive` schedules its
arrival, :meth:`~LiveFeed.advance` does everything due up to a time in the replay's order
(``Replayer._step``), and a :class:`LiveListener` hears each pass's new tokens (at the end of
the pass that produced them, before the pass's own publication) and each request's end.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

from servesim.replay.driver import ARRIVAL
from servesim.workload.model import Turn

if TYPE_CHECKING:
    from servesim.contract import PassCompletionEffects
    from servesim.tokens import TokenSeq


class LiveListener:
    """What a live replayer tells its driver; every hook does nothing here."""

    def tokens(self, rid: int, count: int, now: float) -> None:
        """Request ``rid`` got ``count`` tokens from a decode pass ending at ``now``."""

    def ended(self, rid: int, now: float) -> None:
        """Request ``rid`` ended at ``now``: completed, failed or cancelled."""

    def pass_completed(self, w: int, dp_rank: int, eff: PassCompletionEffects) -> None:
        """A pass of worker ``w``'s rank ``dp_rank`` completed (after its tokens were told)."""

    def preempted(self, w: int, dp_rank: int, count: int) -> None:
        """``count`` requests were preempted on worker ``w``'s rank ``dp_rank``."""


class LiveFeed:
    """The live feeding of a replayer (module docstring); a concrete class calls
    :meth:`init_feed` once its replayer is built."""

    # Declared for the type checker: the replayer's own state and steps.
    turns: list[Turn]
    session_of: list[str]
    session_index: list[int]
    next_turn: list[int]
    log: Any
    now: float
    _heap: list[Any]
    has_deadlines: bool

    def init_feed(self) -> None:
        self.listener = LiveListener()
        self.receipt: list[float] = []  # per request: the time it was received
        self._told: list[int] = []  # tokens told to the listener, per request
        self.until = 0.0  # the latest time advanced to

    # -- feeding it -------------------------------------------------------------------------

    def add(self, prompt: TokenSeq, output_length: int, lora: int = 0) -> int:
        """A new request (not yet arrived; ``lora``: its LoRA adapter id); returns its id."""
        rid = len(self.turns)
        self.turns.append(Turn(rid, prompt, output_length, lora=lora))
        self.session_of.append(str(rid))
        self.session_index.append(rid)
        self.next_turn.append(-1)
        self.log.append_request(len(prompt))
        self.receipt.append(-1.0)
        self._told.append(0)
        self.add_columns(rid)
        return rid

    def add_columns(self, rid: int) -> None:
        """Grow the replayer's own per-request records by request ``rid``'s slot."""

    def arrive(self, rid: int, at: float, received: float | None = None) -> None:
        """Request ``rid`` reaches the (first) router at ``at`` (not before the last time
        advanced to); its logged arrival is ``received`` (default ``at``), e.g. a server's
        receipt that came before a moment it has already acted on."""
        self.receipt[rid] = at if received is None else min(received, at)
        self.push_event(at, ARRIVAL, rid)

    def advance(self, until: float) -> None:
        """Everything due by ``until``, one simulated time after another."""
        self.until = max(self.until, until)
        heap = self._heap
        while heap and heap[0][0] <= until:
            ev = heapq.heappop(heap)
            self.now = ev[0]
            self._step(ev, ev[0], self.has_deadlines)

    def next_event_ms(self) -> float | None:
        """The time of the earliest pending event (a pass end, a deadline, a transfer)."""
        return self._heap[0][0] if self._heap else None

    # -- hooks into the replay ----------------------------------------------------------------

    def _publish_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> bool:
        self.tell_pass(w, dp_rank, eff, now)
        busy: bool = super()._publish_pass(w, dp_rank, eff, now)  # type: ignore[misc]
        self.listener.pass_completed(w, dp_rank, eff)
        return busy

    def tell_pass(self, w: int, dp_rank: int, eff: PassCompletionEffects, now: float) -> None:
        """Tell the listener the new tokens of the requests with tokens in this pass."""
        ids = eff.outputs.token_request_ids
        if ids:
            for rid in dict.fromkeys(ids):
                self._tell(rid, now)

    def _tell(self, rid: int, now: float) -> None:
        count = self.log.ntok[rid] - self._told[rid]
        if count > 0:
            self._told[rid] += count
            self.listener.tokens(rid, count, now)

    def finish_request(self, rid: int, now: float) -> None:
        self._tell(rid, now)
        super().finish_request(rid, now)  # type: ignore[misc]
        self.listener.ended(rid, now)

    def _preempted(self, w: int, dp_rank: int, now: float, count: int) -> None:
        super()._preempted(w, dp_rank, now, count)  # type: ignore[misc]
        self.listener.preempted(w, dp_rank, count)

    # -- the replayer's own (declared for the type checker) ------------------------------------

    if TYPE_CHECKING:
        def push_event(self, at: float, kind: int, a: int, b: int = 0) -> None: ...
        def _step(self, ev: Any, now: float, has_deadlines: bool) -> None: ...


__all__ = ["LiveFeed", "LiveListener"]
