"""Request routers: which worker (and DP rank) serves each arriving request.

Routers are plugins (``servesim_register_routers``); ``cluster.router`` picks one by name and
``cluster.router_config`` configures it through the router's ``config_class``. Built in:

* ``round_robin`` — slots in the order worker 0..W-1 of DP rank 0, then DP rank 1, ...
* ``kv`` — scores every slot by cached-prefix overlap (from the workers' KV events) and load,
  with the cost of Dynamo's KV router (dynamo-mocker.md §9.2; Dynamo's ``logit =
  overlap_score_weight * potential_prefill_blocks + potential_active_blocks``):

  ``cost(s) = overlap_score_weight * (prefill_tokens(s) + new_tokens(s)) / block_size
  + active_blocks(s) + new_blocks(s)``, where ``new_tokens(s) = max(isl - overlap_blocks(s) *
  block_size, 0)``, ``overlap_blocks`` counts the request's leading blocks that ``s`` holds in
  its KV cache, ``prefill_tokens`` the routed-but-unprefilled new tokens on ``s``,
  ``active_blocks`` the distinct prompt blocks of its in-flight requests
  (:class:`ClusterState`), and ``new_blocks`` the request's blocks not among them. The lowest
  cost wins; ties go to fewer active requests, then to the first slot at or after a rotating
  pointer, so equal workers are used in turn. Dynamo breaks ties at random; servesim rotates
  to stay deterministic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from attrs import frozen

from servesim.contract import ClearedBlocks, KvEvent, RemovedBlocks, Request, StoredBlocks
from servesim.replay.cluster import ClusterState


class Router(ABC):
    """Chooses ``(worker, dp_rank)`` for each request.

    ``wants_block_hashes``: the driver passes the prompt's sequence block hashes at the engine
    block size (else an empty list). ``wants_kv_events``: engines are built with KV events on
    and the driver feeds every event batch to :meth:`on_kv_events`.
    """

    config_class: ClassVar[type | None] = None
    wants_block_hashes: ClassVar[bool] = False
    wants_kv_events: ClassVar[bool] = False

    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        self.num_workers = num_workers
        self.dp_size = dp_size
        self.block_size = block_size
        self.config = config

    @abstractmethod
    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        """The ``(worker, dp_rank)`` that serves ``request``."""

    def routed(self, request: Request, worker: int, dp_rank: int, state: ClusterState) -> None:
        """Record the decision in ``state`` (all prompt tokens count as pending prefill)."""
        isl = request.prompt_len
        blocks = -(-isl // self.block_size)
        state.add(request.request_id, state.slot(worker, dp_rank), isl, blocks)

    def on_kv_events(self, worker: int, events: Sequence[KvEvent]) -> None:  # noqa: B027
        """KV events of one worker, in order (ignored unless ``wants_kv_events``)."""


class RoundRobinRouter(Router):
    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        super().__init__(num_workers, dp_size, block_size, config)
        self._next = 0

    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        k = self._next
        self._next = (k + 1) % (self.num_workers * self.dp_size)
        return k % self.num_workers, k // self.num_workers


@frozen(kw_only=True)
class KvRouterConfig:
    """``overlap_score_weight``: weight of prefill work against decode load (Dynamo default 1)."""

    overlap_score_weight: float = 1.0


class KvIndex:
    """Which slots hold each block hash: ``hash -> bitmask of slots``."""

    __slots__ = ("_index", "dp_size")

    def __init__(self, dp_size: int) -> None:
        self._index: dict[int, int] = {}
        self.dp_size = dp_size

    def apply(self, worker: int, events: Sequence[KvEvent]) -> None:
        index = self._index
        get = index.get
        pop = index.pop
        base = worker * self.dp_size
        for ev in events:
            bit = 1 << (base + ev.dp_rank)
            data = ev.data
            kind = type(data)
            if kind is RemovedBlocks or (kind is not StoredBlocks and isinstance(data, RemovedBlocks)):
                keep = ~bit
                for h in data.block_hashes:
                    m = get(h, 0) & keep
                    if m:
                        index[h] = m
                    else:
                        pop(h, None)
            elif kind is StoredBlocks or isinstance(data, StoredBlocks):
                for b in data.blocks:
                    h = b.block_hash
                    index[h] = get(h, 0) | bit
            elif isinstance(data, ClearedBlocks):
                keep = ~bit
                for h in [h for h, m in index.items() if m & bit]:
                    m = index[h] & keep
                    if m:
                        index[h] = m
                    else:
                        del index[h]

    def overlaps(self, block_hashes: Sequence[int], num_slots: int) -> list[int]:
        """Per slot, how many leading blocks of the sequence it holds."""
        out = [0] * num_slots
        active = (1 << num_slots) - 1
        index = self._index
        depth = 0
        for h in block_hashes:
            m = index.get(h, 0) & active
            if m != active:
                dropped = active & ~m
                while dropped:
                    low = dropped & -dropped
                    out[low.bit_length() - 1] = depth
                    dropped ^= low
                active = m
            if not active:
                return out
            depth += 1
        while active:
            low = active & -active
            out[low.bit_length() - 1] = depth
            active ^= low
        return out

    def __len__(self) -> int:
        return len(self._index)


class KvRouter(Router):
    config_class = KvRouterConfig
    wants_block_hashes = True
    wants_kv_events = True

    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        super().__init__(num_workers, dp_size, block_size, config or KvRouterConfig())
        self.index = KvIndex(dp_size)
        self._next = 0
        self._last_new_tokens: dict[int, int] = {}
        self._last_hashes: tuple[int, ...] = ()

    def on_kv_events(self, worker: int, events: Sequence[KvEvent]) -> None:
        self.index.apply(worker, events)

    def costs(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[list[float], list[int]]:
        """``(cost per slot, new prefill tokens per slot)`` per the module formula."""
        n = state.num_slots
        bs = self.block_size
        isl = request.prompt_len
        w = self.config.overlap_score_weight
        overlap = self.index.overlaps(block_hashes, n)
        new = [max(isl - o * bs, 0) for o in overlap]
        blocks = -(-isl // bs)
        cost = []
        for s in range(n):
            active = state.active_hashes[s]
            new_blocks = blocks - sum(map(active.__contains__, block_hashes))
            prefill = w * (new[s] + state.prefill_tokens[s]) / bs
            cost.append(prefill + state.active_blocks[s] + new_blocks)
        return cost, new

    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        cost, new = self.costs(request, block_hashes, state)
        self._last_hashes = tuple(block_hashes)
        n = len(cost)
        start = self._next
        best = min(
            range(n),
            key=lambda s: (cost[s], state.active_requests[s], (s - start) % n),
        )
        self._next = (best + 1) % n
        self._last_new_tokens[request.request_id] = new[best]
        return best // self.dp_size, best % self.dp_size

    def routed(self, request: Request, worker: int, dp_rank: int, state: ClusterState) -> None:
        new = self._last_new_tokens.pop(request.request_id, request.prompt_len)
        blocks = -(-request.prompt_len // self.block_size)
        state.add(request.request_id, state.slot(worker, dp_rank), new, blocks, self._last_hashes)
