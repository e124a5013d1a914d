"""Aggregated workers and the load the router sees.

Each worker is an :class:`servesim.engine.Engine` (``dp_size`` ranks). A *slot* is one
``(worker, dp_rank)`` pair, numbered ``worker * dp_size + dp_rank``. :class:`ClusterState`
tracks, per slot, what a front-end router knows without peeking inside engines: requests routed
and not yet finished, prompt tokens still waiting for their prefill (cleared at the first
token), and the prompt blocks of in-flight requests. When block hashes are given, a block
shared by several in-flight prompts on one slot counts once, as in Dynamo's active-sequence
tracking; decode growth is not tracked.
"""

from __future__ import annotations

from collections.abc import Callable

from servesim.engine import Engine


class ClusterState:
    """Per-slot load, maintained by the driver from routing decisions and request progress."""

    __slots__ = ("num_workers", "dp_size", "active_requests", "prefill_tokens", "active_blocks",
                 "active_hashes", "_slot", "_prefill", "_blocks", "_hashes", "_tails")

    def __init__(self, num_workers: int, dp_size: int) -> None:
        self.num_workers = num_workers
        self.dp_size = dp_size
        n = num_workers * dp_size
        self.active_requests = [0] * n
        self.prefill_tokens = [0] * n
        self.active_blocks = [0] * n
        self.active_hashes: list[dict[int, int]] = [{} for _ in range(n)]
        self._slot: dict[int, int] = {}
        self._prefill: dict[int, int] = {}
        self._blocks: dict[int, int] = {}
        self._hashes: dict[int, tuple[int, ...]] = {}
        self._tails: dict[int, int] = {}

    @property
    def num_slots(self) -> int:
        return self.num_workers * self.dp_size

    def slot(self, worker: int, dp_rank: int) -> int:
        return worker * self.dp_size + dp_rank

    def add(
        self,
        request_id: int,
        slot: int,
        prefill_tokens: int,
        blocks: int,
        block_hashes: tuple[int, ...] | None = None,
    ) -> None:
        """Route a request of ``blocks`` prompt blocks; with ``block_hashes`` (its full blocks),
        blocks already active on the slot are not counted again."""
        self._slot[request_id] = slot
        self._prefill[request_id] = prefill_tokens
        if block_hashes is not None:
            counts = self.active_hashes[slot]
            fresh = 0
            for h in block_hashes:
                c = counts.get(h, 0)
                fresh += c == 0
                counts[h] = c + 1
            self._hashes[request_id] = block_hashes
            tail = blocks - len(block_hashes)  # a partial last block is never shared
            self._tails[request_id] = tail
            blocks = fresh + tail
        self._blocks[request_id] = blocks
        self.active_requests[slot] += 1
        self.prefill_tokens[slot] += prefill_tokens
        self.active_blocks[slot] += blocks

    def prefill_done(self, request_id: int) -> None:
        tokens = self._prefill.pop(request_id, 0)
        if tokens:
            self.prefill_tokens[self._slot[request_id]] -= tokens

    def finish(self, request_id: int) -> None:
        slot = self._slot.pop(request_id, None)
        if slot is None:
            return
        self.prefill_tokens[slot] -= self._prefill.pop(request_id, 0)
        blocks = self._blocks.pop(request_id, 0)
        hashes = self._hashes.pop(request_id, None)
        if hashes is not None:
            counts = self.active_hashes[slot]
            freed = 0
            for h in hashes:
                c = counts[h] - 1
                if c:
                    counts[h] = c
                else:
                    del counts[h]
                    freed += 1
            blocks = freed + self._tails.pop(request_id)
        self.active_blocks[slot] -= blocks
        self.active_requests[slot] -= 1


def build_engines(build: Callable[[int], Engine], workers: int) -> list[Engine]:
    """``workers`` engines with worker ids ``0..workers-1`` (e.g. ``EngineFactory.build``)."""
    if workers < 1:
        raise ValueError(f"cluster.workers must be >= 1, got {workers}")
    engines = [build(w) for w in range(workers)]
    sizes = {e.dp_size for e in engines}
    if len(sizes) != 1:
        raise ValueError(f"every worker must have the same dp_size, got {sorted(sizes)}")
    return engines
