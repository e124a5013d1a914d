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
        "cached_prefix",
        "cached_signaled",
        "blocks",
        "work",
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
        self.table = BlockTable()
        self.status = Status.WAITING
        self.preemptions = 0
        self.cached_prefix: int | None = None
        self.cached_signaled = False
        self.blocks = SequenceBlocks(request)
        self.work: object | None = None  # this pass's scheduling details (scheduler-owned)

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

    def load_prompt_hashes(self, block_size: int) -> None:
        self.blocks.load_prompt(block_size)

    def ensure_hashes(self, nblocks: int, block_size: int) -> None:
        """Hashes of the first ``nblocks`` full blocks of the known tokens."""
        self.blocks.hashes(nblocks, block_size)

    def tokens(self, start: int, end: int) -> list[int]:
        return self.blocks.tokens(start, end)

    def __repr__(self) -> str:
        return (
            f"VllmRequest({self.rid}, {self.status.value}, len={self.length}, "
            f"computed={self.computed}, generated={self.generated}/{self.max_out})"
        )


__all__ = ["Status", "VllmRequest"]
