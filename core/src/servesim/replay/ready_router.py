"""The router's view of an elastic cluster: only ready workers.

:class:`ReadyRouter` stands between the driver and the configured router. The router is built
for the ready workers alone, numbered ``0..R-1`` in worker order, with a
:class:`~servesim.replay.cluster.ClusterState` of their in-flight requests; whenever the set
of ready workers changes a fresh router is built for the new set and told, for each ready
worker, what its device KV cache holds (one ``StoredBlocks`` event per DP rank, block hashes
only) so a cache-aware router keeps its knowledge across the change. Each worker's KV events
are kept in a :class:`~servesim.replay.routers.KvIndex` of real worker ids to that end, and
forwarded to the router while the worker is ready. Decisions map back to real worker ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.contract import KvBlock, KvEvent, Request, StoredBlocks
from servesim.replay.cluster import ClusterState
from servesim.replay.routers import KvIndex, RoundRobinRouter, Router


class ReadyRouter(Router):
    """Routes among ready workers through ``inner``'s class (see the module docs).

    ``wants_block_hashes`` and ``wants_kv_events`` are the inner router's; KV events reach
    this class as :class:`KvEvent` objects (it accepts no compact records)."""

    def __init__(self, inner: Router, ready: Sequence[int]) -> None:
        super().__init__(inner.num_workers, inner.dp_size, inner.block_size, inner.config)
        self.router_class = type(inner)
        self.inner = inner
        self.index = KvIndex(inner.dp_size)
        self.ready: list[int] = []
        self.compact: dict[int, int] = {}
        self.state = ClusterState(1, inner.dp_size)
        # Per request routed and not finished: (real worker, dp rank, block hashes); the
        # router's bookkeeping of it is rebuilt from this when the ready set changes.
        self.routed_to: dict[int, tuple[int, int, Request, Sequence[int]]] = {}
        self.rebuilds = 0
        # Whether a request has had its first token (its prefill no longer pending); the
        # driver sets it.
        self.prefilled: Any = lambda rid: False
        self.last_hashes: Sequence[int] = ()
        # The worker the last request went to (None: none yet).
        self.last_choice: int | None = None
        # Called with each router built for a new ready set, before it is told anything.
        self.prepare: Any = None
        self.set_ready(ready)

    @property
    def wants_block_hashes(self) -> bool:  # type: ignore[override]
        return self.inner.wants_block_hashes

    @property
    def wants_kv_events(self) -> bool:  # type: ignore[override]
        return self.inner.wants_kv_events

    def set_ready(self, ready: Sequence[int]) -> None:
        """The ready workers are now ``ready`` (ascending): rebuild the router for them."""
        ready = sorted(ready)
        if ready == self.ready:
            return
        first = not self.ready and self.rebuilds == 0
        self.ready = ready
        self.compact = {w: i for i, w in enumerate(ready)}
        n = max(len(ready), 1)
        if first and len(ready) == self.inner.num_workers:
            inner = self.inner  # the configured router as built, for the initial workers
        else:
            inner = self.router_class(n, self.dp_size, self.block_size, self.config)
            if self.prepare is not None:
                self.prepare(inner)
        self.rebuilds += 1
        self.inner = inner
        self.state = ClusterState(n, self.dp_size)
        if inner.wants_kv_events:
            for i, w in enumerate(ready):
                events = self.cache_events(w)
                if events:
                    inner.on_kv_events(i, events)
        for rid, (w, dp, req, hashes) in self.routed_to.items():
            i = self.compact.get(w)
            if i is not None:
                self.record(inner, req, i, dp, hashes)
                if self.prefilled(rid):
                    self.state.prefill_done(rid)
        # By MRO: compiled router classes share their ABC caches (servesim.sinks.base.declares).
        if RoundRobinRouter in type(inner).__mro__ and self.last_choice is not None:
            # Round robin goes on after the worker it chose last, as Dynamo's replay does
            # when a worker joins or leaves (checked against ai-dynamo 1.6.1's replay).
            inner.start_at(sum(1 for w in ready if w <= self.last_choice))

    def record(self, inner: Router, req: Request, i: int, dp: int, hashes: Sequence[int]) -> None:
        """Tell ``inner`` a request sits on its slot ``(i, dp)`` (its select, then routed)."""
        if inner.wants_block_hashes:
            inner.select(req, hashes, self.state)  # the router's per-request notes
        inner.routed(req, i, dp, self.state)

    def cache_events(self, worker: int) -> list[KvEvent]:
        """``worker``'s device KV contents as one StoredBlocks event per DP rank."""
        out = []
        held = self.index.held
        for dp in range(self.dp_size):
            s = worker * self.dp_size + dp
            if s < len(held) and held[s]:
                blocks = tuple(KvBlock(h, h) for h in sorted(held[s]))
                out.append(KvEvent(0, dp, StoredBlocks(None, blocks)))
        return out

    def select(self, request: Request, block_hashes: Sequence[int], state: Any) -> tuple[int, int]:
        if not self.ready:
            raise RuntimeError("no ready worker to route to")
        i, dp = self.inner.select(request, block_hashes, self.state)
        self.last_hashes = block_hashes
        self.last_choice = self.ready[i]
        return self.ready[i], dp

    def routed(self, request: Request, worker: int, dp_rank: int, state: Any) -> None:
        self.inner.routed(request, self.compact[worker], dp_rank, self.state)
        self.routed_to[request.request_id] = (worker, dp_rank, request, tuple(self.last_hashes))

    def forget(self, request_id: int) -> None:
        """The request left its worker (finished, failed, redirected or retried)."""
        self.routed_to.pop(request_id, None)
        self.state.finish(request_id)

    def on_kv_events(self, worker: int, events: Sequence[KvEvent]) -> None:
        self.index.apply(worker, events)
        i = self.compact.get(worker)
        if i is not None and self.inner.wants_kv_events:
            self.inner.on_kv_events(i, events)
