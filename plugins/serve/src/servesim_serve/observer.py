"""What the live driver tells the outside about requests and passes, at one place.

The driver calls an :class:`Observer` at each event; the server's ``/metrics``
(:mod:`servesim_serve.metrics`) is one. Times handed over are simulated ms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesim.contract import ForwardPassMetrics, Metrics

    from servesim_serve.records import LiveRequest


class Observer:
    """Every hook does nothing; subclasses pick the ones they need. ``wants_fpm``: the
    engines must emit forward-pass metrics for :meth:`pass_completed`."""

    wants_fpm = False

    def render(self) -> bytes:
        """The ``/metrics`` body (nothing here)."""
        return b""

    def watch(self, engines: Sequence[Any], block_size: int,
              home: Callable[[int], tuple[int, int]] | None = None) -> None:
        """The driver's engines (worker ``w`` is ``engines[w]``), whose ranks' current state
        :meth:`render` may read; ``home``: for a prefill/decode split, the ``(worker, dp_rank)``
        a request (by id) is on now (its requests move between workers)."""

    def watch_cluster(self, cluster: Any) -> None:
        """An elastic cluster's driver (servesim_serve.elastic_driver.LiveElasticDriver):
        ``cluster.worker_counts()`` gives ``(pool, state, workers)`` and
        ``cluster.dead_workers()`` the workers whose engine is discarded, at any time."""

    def arrived(self, req: LiveRequest, metrics: Metrics | None) -> None:
        """``req`` was submitted to its engine (``metrics``: the rank's state after it)."""

    def tokens(self, req: LiveRequest, count: int, now: float) -> None:
        """A pass ending at ``now`` gave ``req`` ``count`` tokens (already in ``req.times``)."""

    def finished(self, req: LiveRequest) -> None:
        """``req`` ended: completed, rejected or cancelled."""

    def flush(self) -> None:
        """Do what was deferred: the driver calls this once a pass's first chunks are written
        (and after a cancellation), so that bookkeeping no client waits for comes after them.
        :meth:`render` must include what is still deferred."""

    def stopped(self) -> None:
        """The simulation stopped (a failing sink, a poisoned engine): every request in flight
        was aborted (each told to :meth:`finished` first) and no pass will run again."""

    def cancelled(self, req: LiveRequest, metrics: Metrics | None) -> None:
        """``req`` was cancelled (after :meth:`finished`)."""

    def preempted(self, worker: int, count: int, dp_rank: int = 0) -> None:
        """``count`` requests were preempted on ``worker``'s ``dp_rank``."""

    def pass_completed(self, worker: int, dp_rank: int, metrics: Metrics | None,
                       fpm: ForwardPassMetrics | None = None) -> None:
        """A pass of ``worker``'s ``dp_rank`` completed; ``metrics``: the rank's state,
        ``fpm``: the pass's forward-pass metrics (when the engines emit them)."""
