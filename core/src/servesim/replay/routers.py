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
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import takewhile
from operator import attrgetter
from typing import Any, ClassVar

from attrs import frozen

from servesim._compiled import mypyc_attr
from servesim.contract import ClearedBlocks, KvEvent, RemovedBlocks, Request, StoredBlocks
from servesim.kv.event_records import RemovedRun, StoredRun
from servesim.replay.adapter_affinity import AdapterAffinity
from servesim.replay.cluster import ClusterState
from servesim.tokens import TokenSeq

_BLOCK_HASH = attrgetter("block_hash")


@mypyc_attr(allow_interpreted_subclasses=True)
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


@mypyc_attr(allow_interpreted_subclasses=True)
class RoundRobinRouter(Router):
    # Runs of passes past arrivals routed elsewhere: this router implements the optional
    # protocol servesim.fast.router_exclusion.ProvesExclusion, exactly.
    proves_exclusion = True

    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        super().__init__(num_workers, dp_size, block_size, config)
        self._next = 0

    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        k = self._next
        self._next = (k + 1) % (self.num_workers * self.dp_size)
        return k % self.num_workers, k // self.num_workers

    def start_at(self, slot: int) -> None:
        """The next request goes to worker ``slot`` (modulo the workers), DP rank 0."""
        self._next = slot % self.num_workers

    def exclusion_margins(
        self, worker: int, arrivals: Iterable[tuple[TokenSeq, Sequence[int]]], state: ClusterState
    ) -> Iterator[float]:
        """Exact: the choice depends on the pointer alone, which only routing advances."""
        n = self.num_workers * self.dp_size
        k = self._next
        for _ in arrivals:
            if k % self.num_workers == worker:
                return
            yield float("inf")
            k = (k + 1) % n

    def exclusion_relief(self, state: ClusterState, request_id: int) -> float:
        """Finishes never move the pointer."""
        return 0.0


@frozen(kw_only=True)
class KvRouterConfig:
    """``overlap_score_weight``: weight of prefill work against decode load (Dynamo default 1).
    ``adapter_affinity``: cost credit (KV blocks) of a slot that was recently sent the
    request's LoRA adapter, one of the last ``adapter_slots`` distinct adapters routed there
    (servesim.replay.adapter_affinity); 0 turns it off."""

    overlap_score_weight: float = 1.0
    adapter_affinity: float = 0.0
    adapter_slots: int = 4


class KvIndex:
    """Which slots hold each block hash: one set of held hashes per slot.

    Per-slot sets let a whole event be applied by one set operation (no per-block Python
    step), which matters because every pass's stores and evictions pass through here; a
    lookup then walks each slot's set only as far as its cached prefix reaches.
    """

    __slots__ = ("held", "dp_size")

    def __init__(self, dp_size: int) -> None:
        self.held: list[set[int]] = []
        self.dp_size = dp_size

    def _slot_set(self, slot: int) -> set[int]:
        held = self.held
        while len(held) <= slot:
            held.append(set())
        return held[slot]

    def apply(self, worker: int, events: Sequence[Any]) -> None:
        """Apply one worker's batch of ``KvEvent`` objects and compact records
        (servesim.kv.event_records: device-tier runs, one set operation each)."""
        held = self.held
        base = worker * self.dp_size
        dp = -1
        blocks: set[int] = set()
        for ev in events:
            if ev.dp_rank != dp:  # a batch is nearly always one rank's
                dp = ev.dp_rank
                s = base + dp
                blocks = held[s] if s < len(held) else self._slot_set(s)
            te = type(ev)
            if te is RemovedRun:
                if blocks:  # else nothing to remove (an index of unshareable blocks stays empty)
                    blocks.difference_update(ev.hashes)
                continue
            if te is StoredRun:
                k = ev.shared  # blocks past it match no prompt: lookups never reach them
                if k:
                    hs = ev.hashes
                    blocks.update(hs if k >= len(hs) else hs[:k])
                continue
            data = ev.data
            t = type(data)
            # The index scores device (G1) residency: host-tier events (a medium) differ.
            if t is RemovedBlocks:
                if data.medium is None:
                    hashes = data.block_hashes
                    if len(hashes) == 1:
                        blocks.discard(hashes[0])
                    else:
                        blocks.difference_update(hashes)
            elif t is StoredBlocks:
                if data.medium is None:
                    blocks.update(map(_BLOCK_HASH, data.blocks))
            elif getattr(data, "medium", None) is not None:
                continue
            elif isinstance(data, RemovedBlocks):
                blocks.difference_update(data.block_hashes)
            elif isinstance(data, StoredBlocks):
                blocks.update(map(_BLOCK_HASH, data.blocks))
            elif isinstance(data, ClearedBlocks):
                blocks.clear()

    def overlaps(self, block_hashes: Sequence[int], num_slots: int) -> list[int]:
        """Per slot, how many leading blocks of the sequence it holds."""
        out = [0] * num_slots
        if not block_hashes:
            return out
        first = block_hashes[0]
        for s, blocks in enumerate(self.held[:num_slots]):
            if first in blocks:
                out[s] = len(list(takewhile(blocks.__contains__, block_hashes)))
        return out

    def slot_masks(self) -> dict[int, int]:
        """``hash -> bitmask of the slots holding it`` (for inspection and tests)."""
        out: dict[int, int] = {}
        for s, blocks in enumerate(self.held):
            bit = 1 << s
            for h in blocks:
                out[h] = out.get(h, 0) | bit
        return out

    @property
    def _index(self) -> dict[int, int]:
        """:meth:`slot_masks` under the former representation's name (read-only)."""
        return self.slot_masks()

    def __len__(self) -> int:
        return len(set().union(*self.held))


def _water_level(loads: list[float], extra: float) -> float:
    """The highest minimum of ``loads`` (ascending) after adding ``extra`` in any split: an
    upper bound on the cheapest other slot's load term once the skipped arrivals, whose
    summed cost terms are ``extra``, land wherever the router sends them."""
    level = loads[0]
    for n, nxt in enumerate(loads[1:], 1):
        room = (nxt - level) * n
        if extra <= room:
            return level + extra / n
        extra -= room
        level = nxt
    return level + extra / len(loads)


def _is_placeholder(h: int) -> bool:
    return h < 0


def shared_prefix(block_hashes: Sequence[int]) -> Sequence[int]:
    """``block_hashes`` less its trailing placeholders.

    A placeholder (a negative hash, ``servesim.kv.hashing.placeholder_hashes``) stands for a
    block that only its own request can hold: no worker caches it before that request is
    routed, and no other prompt contains it. It therefore never adds to an overlap or to
    another request's shared blocks, and scores exactly as the partial tail block does, so
    the router tracks only the blocks before it.
    """
    n = len(block_hashes)
    if not n or block_hashes[-1] >= 0:
        return block_hashes
    if block_hashes[0] < 0 and max(block_hashes) < 0:  # the whole prompt is its own
        return ()
    # Placeholders follow the last real hash (a bisection finds the boundary); should a
    # negative hash precede a real one, walk back to the last real hash instead.
    k = bisect_left(block_hashes, True, key=_is_placeholder)
    if k == n or max(block_hashes[k:]) >= 0:
        k = n
        while k and block_hashes[k - 1] < 0:
            k -= 1
    return block_hashes[:k]


@mypyc_attr(allow_interpreted_subclasses=True)
class KvRouter(Router):
    config_class = KvRouterConfig
    wants_block_hashes = True
    wants_kv_events = True
    #: :meth:`on_kv_events` takes compact records (servesim.kv.event_records).
    accepts_kv_records: ClassVar[bool] = True

    def __init__(self, num_workers: int, dp_size: int, block_size: int, config: Any = None) -> None:
        super().__init__(num_workers, dp_size, block_size, config or KvRouterConfig())
        self.index = KvIndex(dp_size)
        self._next = 0
        self._last_new_tokens: dict[int, int] = {}
        self._last_hashes: tuple[int, ...] = ()
        cfg = self.config
        self.affinity = (AdapterAffinity.build(cfg.adapter_affinity, cfg.adapter_slots,
                                               num_workers * dp_size)
                         if cfg.adapter_affinity else None)

    def on_kv_events(self, worker: int, events: Sequence[KvEvent]) -> None:
        self.index.apply(worker, events)

    def costs(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[list[float], list[int]]:
        """``(cost per slot, new prefill tokens per slot)`` per the module formula."""
        return self._costs(request, shared_prefix(block_hashes), state)

    def _costs(
        self, request: Request, shared: Sequence[int], state: ClusterState
    ) -> tuple[list[float], list[int]]:
        """:meth:`costs` of a prompt whose blocks after ``shared`` are its own."""
        n = state.num_slots
        bs = self.block_size
        isl = request.prompt_len
        w = self.config.overlap_score_weight
        blocks = -(-isl // bs)
        if not shared:  # no block another request could hold: no overlap, none active
            return [
                w * (isl + p) / bs + a + blocks
                for p, a in zip(state.prefill_tokens, state.active_blocks, strict=True)
            ], [isl] * n
        overlap = self.index.overlaps(shared, n)
        held = state.held_counts(shared)
        if any(overlap):
            new = [max(isl - o * bs, 0) for o in overlap]
        else:
            new = [isl] * n  # max(isl, 0): a prompt length is never negative
        cost = [
            w * (t + p) / bs + a + (blocks - c)
            for t, p, a, c in zip(new, state.prefill_tokens, state.active_blocks, held, strict=True)
        ]
        return cost, new

    def select(
        self, request: Request, block_hashes: Sequence[int], state: ClusterState
    ) -> tuple[int, int]:
        shared = shared_prefix(block_hashes)
        cost, new = self._costs(request, shared, state)
        if self.affinity is not None:
            cost = self.affinity.adjust(request.lora, cost)
        self._last_hashes = tuple(shared)
        n = len(cost)
        low = min(cost)
        if low == low and cost.count(low) == 1:  # one cheapest slot (the usual case)
            best = cost.index(low)
        else:  # ties (or NaN): fewer active requests, then the rotating pointer
            start = self._next
            best = min(
                range(n),
                key=lambda s: (cost[s], state.active_requests[s], (s - start) % n),
            )
        self._next = (best + 1) % n
        self._last_new_tokens[request.request_id] = new[best]
        return best // self.dp_size, best % self.dp_size

    #: Off by default: on the 4-worker vLLM benchmark (vllm-4w-kv) the proof succeeds at
    #: about a quarter of run starts (the running worker is usually the cheapest slot for the
    #: next arrival), cutting runs by a fifth, but the look-ahead costs about as much CPU as
    #: the runs it saves. Tests switch it on to check the bounds.
    exclusion_enabled: ClassVar[bool] = False

    @property
    def proves_exclusion(self) -> bool:
        w = self.config.overlap_score_weight
        # The bounds below assume a cost rising with load, and know no adapter affinity.
        return self.exclusion_enabled and 0 <= w < float("inf") and self.affinity is None

    def exclusion_margins(
        self, worker: int, arrivals: Iterable[tuple[TokenSeq, Sequence[int]]], state: ClusterState
    ) -> Iterator[float]:
        """Router-side bounds of the margins of
        :class:`~servesim.fast.router_exclusion.ProvesExclusion` (dp_size 1: slot = worker).

        At the arrival, ``worker``'s cost is at least its cost now with overlap and held
        blocks as now (its overlap cannot grow: it stores no prompt block; held blocks only
        fall, so ``new_blocks`` does not fall), less its finishing requests' relief. Another
        slot's cost is at most ``weight * (isl + prefill + I) / bs + active + B + blocks``,
        where ``I`` and ``B`` sum the prompt tokens and blocks of the earlier arrivals (each
        could land there): ``new_tokens <= isl`` and ``new_blocks <= blocks`` whatever its
        evictions did. The margin is the gap less a rounding tolerance; routing picks the
        strictly cheapest slot or breaks a tie, so a positive margin excludes ``worker``."""
        wt = self.config.overlap_score_weight
        bs = self.block_size
        pre, act = state.prefill_tokens, state.active_blocks
        loads = [wt * p / bs + a for p, a in zip(pre, act, strict=True)]
        own = loads.pop(worker)
        if not loads or not own > min(loads):
            return  # every margin below is at most own - min(loads)
        others = sorted(loads)
        held = self.index.held
        mine = held[worker] if worker < len(held) else set()
        added = 0.0
        for prompt, hashes in arrivals:
            isl = len(prompt)
            blocks = -(-isl // bs)
            shared = shared_prefix(hashes)
            if shared:
                ov = len(list(takewhile(mine.__contains__, shared)))
                lb = wt * (max(isl - ov * bs, 0) + pre[worker]) / bs + act[worker] + (
                    blocks - state.held_counts(shared)[worker])
            else:
                lb = own + wt * isl / bs + blocks
            own_cost = wt * isl / bs + blocks
            ub = own_cost + _water_level(others, added)
            yield lb - ub - 1e-9 * (abs(lb) + abs(ub) + 1.0)
            added += own_cost

    def exclusion_relief(self, state: ClusterState, request_id: int) -> float:
        blocks, prefill = state.release_bound(request_id)
        return blocks + self.config.overlap_score_weight * prefill / self.block_size

    def routed(self, request: Request, worker: int, dp_rank: int, state: ClusterState) -> None:
        new = self._last_new_tokens.pop(request.request_id, request.prompt_len)
        blocks = -(-request.prompt_len // self.block_size)
        slot = state.slot(worker, dp_rank)
        state.add(request.request_id, slot, new, blocks, self._last_hashes)
        if self.affinity is not None:
            self.affinity.routed(request.lora, slot)
