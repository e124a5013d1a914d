"""Per-request scheduler state of the ``vllm`` rank.

A request's known tokens are its prompt followed by the tokens it generated. Generated
tokens are never stored: token ``g`` is ``output_token_ids[g]`` when the request fixes its
outputs, else a deterministic pseudo token derived from the request id (the reference draws
a random u32, dynamo-mocker.md §2.5; servesim stays reproducible). They are materialised
only a block at a time, when a block that holds them becomes full and needs its hash
(§2.6), so decoding costs no per-token Python objects.
"""

from __future__ import annotations

import enum

from servesim.contract import Request
from servesim.kv.hashing import placeholder_hashes
from servesim.kv.pool import BlockTable
from servesim.kv.sequence import SequenceBlocks


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    # An activated handoff destination: waiting with its prompt KV already transferred
    # (admission stage "Materialized", dynamo-mocker.md §7.2).
    REMOTE = "remote"
    # Parked on a host-to-device load of its prompt prefix (servesim_vllm.host_offload).
    LOADING = "loading"


class VllmRequest:
    """Mutable state of one request owned by a rank."""

    __slots__ = (
        "rid",
        "request",
        "prompt_len",
        "max_out",
        "length",
        "generated",
        "computed",
        "table",
        "status",
        "preemptions",
        "arrival",
        "cached_prefix",
        "cached_signaled",
        "blocks",
        "work",
        "lazy_seq",
        "sb",
        "se",
        "sn",
        "host",
    )

    def __init__(self, request: Request, max_model_len: int | None) -> None:
        self.rid = request.request_id
        self.request = request
        self.prompt_len = len(request.prompt)
        planned = request.planned_output_tokens
        if max_model_len is not None:
            # Generation stops at the model length (aisimulate-engine.md §13.9).
            planned = min(planned, max(0, max_model_len - self.prompt_len))
        self.max_out = planned
        self.length = self.prompt_len
        self.generated = 0
        self.computed = 0
        self.table = BlockTable(self.prompt_len)
        self.table.lora = request.lora  # its Stored events name the adapter
        self.status = Status.WAITING
        self.preemptions = 0
        self.arrival = 0  # arrival order under the priority policy (servesim_vllm.priority)
        self.cached_prefix: int | None = None
        self.cached_signaled = False
        self.blocks = SequenceBlocks(request)
        self.work: object | None = None  # this pass's scheduling details (scheduler-owned)
        # Prompt hashes followed by unique placeholders for generated blocks (finalize_seq).
        self.lazy_seq: list[int] | None = None
        # Length minus the pass counter, end pass and batch serial while the request is in
        # a steady batch (servesim_vllm.fast.steady); meaningless otherwise.
        self.sb = 0
        self.se = 0
        self.sn = 0
        # Host-offload connector state (servesim_vllm.host_offload.HostRequestState).
        self.host: object | None = None

    @property
    def finished_generating(self) -> bool:
        return self.generated >= self.max_out

    # -- hashes ---------------------------------------------------------------------------

    @property
    def seq(self) -> list[int]:
        return self.blocks.seq

    @property
    def loc(self) -> list[int]:
        return self.blocks.loc

    def load_prompt_hashes(self, block_size: int, elide: bool = False) -> None:
        """``elide``: nothing outside this rank reads hashes (no KV events beyond the router's
        index), so blocks no other request can share may use placeholders
        (:meth:`servesim.tokens.TokenSeq.block_hashes_elided`)."""
        self.blocks.load_prompt(block_size, elide)
        self.table.shared = self.blocks.shared_blocks(block_size)

    def ensure_hashes(self, nblocks: int, block_size: int) -> None:
        """Hashes of the first ``nblocks`` full blocks of the known tokens."""
        self.blocks.hashes(nblocks, block_size)

    def finalize_seq(self, nblocks: int, block_size: int, lazy: bool) -> list[int]:
        """Sequence hashes to finalise the first ``nblocks`` full blocks with.

        ``lazy`` (no KV events, pseudo generated tokens): a block holding generated tokens
        gets a unique negative placeholder instead of its hash. Nothing can observe it: no
        event carries it, and no other request's prompt can contain this request's pseudo
        tokens, so no lookup could have hit it. Only the request itself could, after a
        preemption, which is why :meth:`realize_hashes` swaps the real hashes in first.
        The pool treats placeholders like hashes (the block is cached, evictable in LRU order),
        so occupancy, eviction order and every later lookup stay as with real hashes.
        """
        lz = self.lazy_seq
        if lz is None:
            seq = self.blocks.seq
            if len(seq) >= nblocks:
                return seq
            if not lazy:
                # Every block the request can ever fill, in one call (the hashes depend on
                # its known and pseudo tokens alone): decode then finds its block's hash here.
                most = (self.prompt_len + self.max_out) // block_size
                self.blocks.hashes(max(nblocks, most), block_size)
                return self.blocks.seq
            self.lazy_seq = lz = list(seq)
        if len(lz) < nblocks:
            # Every block the request can ever fill at once: one call, not one per block.
            most = max(nblocks, (self.prompt_len + self.max_out) // block_size)
            lz.extend(placeholder_hashes(most - len(lz)))
        return lz

    def realize_hashes(self, block_size: int, pool: object) -> None:
        """Before the request's blocks are released on preemption: compute the real hashes of
        its placeholder blocks and re-key them in ``pool`` (servesim.kv.pool.BlockPool.rekey)."""
        lz = self.lazy_seq
        if lz is None:
            return
        self.lazy_seq = None
        lo = len(self.blocks.seq)
        hi = min(len(lz), self.table.num_cached)
        if hi > lo:
            self.blocks.hashes(hi, block_size)
            pool.rekey(self.table, lo, hi, lz, self.blocks.seq)  # type: ignore[attr-defined]

    def tokens(self, start: int, end: int) -> list[int]:
        return self.blocks.tokens(start, end)

    def __repr__(self) -> str:
        return (
            f"VllmRequest({self.rid}, {self.status.value}, len={self.length}, "
            f"computed={self.computed}, generated={self.generated}/{self.max_out})"
        )


__all__ = ["Status", "VllmRequest"]
