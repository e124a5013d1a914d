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
import sys
from array import array

from xxhash import xxh3_64_intdigest

from servesim.kv.hashing import SEED, chain_hash, local_block_hash
from servesim.kv.pool import BlockTable

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _pseudo_bytes(lo: int, hi: int) -> bytes:
    """Little-endian u32 bytes of tokens ``lo .. hi-1`` (the layout local_block_hash hashes)."""
    data = array("I", range(lo, hi))
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        data.byteswap()
    return data.tobytes()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


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
        "seq",
        "loc",
        "_own_hashes",
        "_tok_base",
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
        self.seq: list[int] = []
        self.loc: list[int] = []
        self._own_hashes = False
        self.work: object | None = None  # this pass's scheduling details (scheduler-owned)
        # Pseudo token g is ``_tok_base + g``: a per-request base below 2**31 keeps every
        # token a u32 and makes generated blocks of different requests differ.
        self._tok_base = ((self.rid * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK64) >> 33

    @property
    def finished_generating(self) -> bool:
        return self.generated >= self.max_out

    # -- hashes ---------------------------------------------------------------------------

    def load_prompt_hashes(self, block_size: int) -> None:
        """Share the prompt's cached block hashes (copied on the first generated block)."""
        if not self.seq:
            self.seq, self.loc = self.request.prompt.block_hashes(block_size)

    def ensure_hashes(self, nblocks: int, block_size: int) -> None:
        """Hashes of the first ``nblocks`` full blocks of the known tokens."""
        seq = self.seq
        if len(seq) >= nblocks:
            return
        if not self._own_hashes:
            self.seq = seq = list(seq)
            self.loc = list(self.loc)
            self._own_hashes = True
        loc = self.loc
        parent = seq[-1] if seq else None
        plen = self.prompt_len
        pseudo = self.request.output_token_ids is None
        for k in range(len(seq), nblocks):
            start = k * block_size
            if pseudo and start >= plen:
                # A block of pseudo tokens only: hash its bytes straight from a range.
                g0 = self._tok_base + start - plen
                h = xxh3_64_intdigest(_pseudo_bytes(g0, g0 + block_size), seed=SEED)
            else:
                h = local_block_hash(self.tokens(start, start + block_size))
            parent = chain_hash(parent, h)
            seq.append(parent)
            loc.append(h)

    def tokens(self, start: int, end: int) -> list[int]:
        """Known tokens ``[start, end)`` (prompt, then generated)."""
        plen = self.prompt_len
        out = self.request.prompt.tokens(start, min(end, plen)) if start < plen else []
        g0 = max(start, plen) - plen
        g1 = end - plen
        if g1 > g0:
            fixed = self.request.output_token_ids
            if fixed is not None:
                out.extend(t & _MASK32 for t in fixed[g0:g1])
            else:
                base = self._tok_base
                out.extend(range(base + g0, base + g1))
        return out

    def __repr__(self) -> str:
        return (
            f"VllmRequest({self.rid}, {self.status.value}, len={self.length}, "
            f"computed={self.computed}, generated={self.generated}/{self.max_out})"
        )


__all__ = ["Status", "VllmRequest"]
