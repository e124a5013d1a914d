"""The runs-of-passes capability of a rank (docs/architecture.md, "Speed by design").

A rank that can commit several consecutive decode passes in one call declares
:class:`RunsOfPasses` among its bases; drivers then ask it for runs between external events
and fall back to stepping whenever it declines. Only a ``dp_size`` 1 engine runs (with several
ranks the DP barrier makes every pass a group decision), and only when its timing model prices
the two-method contract (servesim.timing.pricing). The semantics of a run are in
:mod:`servesim.fast.runs`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from servesim.rank import Capability

if TYPE_CHECKING:
    from servesim.contract import RequestId
    from servesim.fast.runs import RankRun, RunEffects

#: What a rank keeps of a committed run (:attr:`servesim.fast.runs.RankRun.pending`).
RunPendingT = TypeVar("RunPendingT")


class RunsOfPasses(Capability, Generic[RunPendingT]):
    """Capability: commit runs of passes. Every run must equal stepping pass by pass (the
    backend kit checks it, servesim.testing.runs_check)."""

    #: Whether :meth:`execute_run` and :meth:`extend_run` may run through completions when the
    #: driver allows it (``through_completions=True``): a request completed before the run's
    #: last pass simply stops emitting. Default False: the driver never asks.
    runs_through_completions: ClassVar[bool] = False

    @abstractmethod
    def execute_run(self, now_ms: float, horizon_ms: float, max_passes: int,
                    through_completions: bool = False) -> RankRun | None:
        """Called instead of ``execute_pass`` when the rank is ready and the driver knows its
        next external event ``horizon_ms``: commit ``k`` (1 <= k <= ``max_passes``)
        consecutive passes as a :class:`servesim.fast.runs.RankRun`, or decline (None:
        nothing changed, the driver steps).

        Pass 0 starts at ``now_ms``, each next pass at the previous one's end, every pass
        strictly before ``horizon_ms``; the run stops at the first pass whose batch would
        differ from stepping's steady batch (a completion may be the last pass). The result
        must be identical to ``k`` calls of ``execute_pass``/``complete_pass`` with no command
        in between. The group-pass hooks are not called around a run. A command applied while
        the run is in flight belongs to its last pass and receives the run's ``pending``."""

    @abstractmethod
    def complete_run(self, pending: RunPendingT, end_ms: float) -> RunEffects:
        """Called at the run's last boundary ``end_ms``: release the effects of all its
        passes (:class:`servesim.fast.runs.RunEffects`), less the KV events already taken by
        :meth:`take_run_kv_events`."""

    @abstractmethod
    def take_run_kv_events(self, pending: RunPendingT, before_pass: int) -> dict[int, list[Any]]:
        """Called while the run is in flight, once the ends of its passes ``< before_pass``
        are due: hand over (and forget) their KV events, by pass index, so a router sees
        them on time."""

    def extend_run(self, pending: RunPendingT, now_ms: float, horizon_ms: float,
                   max_passes: int, through_completions: bool = False,
                   ) -> tuple[Sequence[float], Sequence[tuple[int, RequestId]]] | None:
        """Called at the in-flight run's last boundary ``now_ms`` when no command reached the
        engine during the run: continue it with more passes, as completing it and calling
        :meth:`execute_run` at ``now_ms`` would have committed them. Returns the new passes'
        ends and their completions before the last one (``(pass, request id)``, passes
        numbered from 0), or None (the default: decline; the run is then completed)."""
        return None
