"""A toy router: the slot with the fewest in-flight requests, the lowest slot on ties."""

from __future__ import annotations

from collections.abc import Sequence

from servesim.contract import Request
from servesim.replay.cluster import ClusterState
from servesim.replay.routers import Router


class LeastLoadedRouter(Router):
    def select(self, request: Request, block_hashes: Sequence[int], state: ClusterState) -> tuple[int, int]:
        loads = state.active_requests  # one entry per slot: worker-major within a dp rank
        slot = min(range(len(loads)), key=loads.__getitem__)
        return slot % self.num_workers, slot // self.num_workers
