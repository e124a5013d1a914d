"""Per-request scheduler state of the trtllm rank.

A request's sequence is its prompt followed by the tokens it generated. ``num_computed``
counts tokens whose KV is written; the newest sampled token is "dangling" until the next
step computes it (dynamo-mocker.md §2.3: a decoding request uses one budget token).
``ctx_len`` is the context the request must (re)compute before it samples: the prompt, or,
after a MAX_UTILIZATION pause, prompt + generated (TensorRT-LLM's ``LlmRequest::pause``
moves the generated tokens into the prompt).

Block identities (dynamo-mocker.md §2.6, §3.1): blocks hash their tokens. Generated tokens
are never stored: token ``g`` is ``output_token_ids[g]`` when the request plans its outputs,
else the deterministic pseudo token ``base + g`` with a per-request ``base`` (the reference
samples random u32 ids, so generated blocks are never shared across requests; servesim
stays reproducible). They are materialised a block at a time, only when a block holding
them becomes full and needs its hash (DESIGN.md §7).
"""

from __future__ import annotations

from servesim.contract import Request
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.kv.pool import BlockTable

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


class TrtRequest:
    """Mutable scheduler state of one owned request."""

    __slots__ = (
        "rid",
        "request",
        "order",
        "prompt_len",
        "max_output",
        "generated",
        "num_computed",
        "ctx_len",
        "table",
        "cached_tokens",
        "first_cached",
        "first_output_sent",
        "started",
        "paused",
        "reject",
        "total_blocks",
        "_seq_hashes",
        "_local_hashes",
        "_base",
    )

    def __init__(self, request: Request, order: int, block_size: int, salt: int) -> None:
        self.rid = request.request_id
        self.request = request
        self.order = order
        self.prompt_len = request.prompt_len
        self.max_output = request.planned_output_tokens
        self.generated = 0
        self.num_computed = 0
        self.ctx_len = self.prompt_len
        self.table = BlockTable()
        self.cached_tokens = 0  # prefix-cache hit of the current (re)admission
        self.first_cached: int | None = None  # hit at first admission (Output.cached_tokens)
        self.first_output_sent = False
        self.started = False  # holds KV blocks (context begun or decoding)
        self.paused = False  # paused by MAX_UTILIZATION; waits to be re-admitted
        self.reject = False
        self.total_blocks = 0
        self._seq_hashes: list[int] | None = None
        self._local_hashes: list[int] | None = None
        # Pseudo token g is ``_base + g``; a base below 2**31 keeps every token a u32.
        self._base = (((salt ^ self.rid) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK64) >> 33

    # -- lengths ----------------------------------------------------------------------------

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.generated

    @property
    def remaining_output(self) -> int:
        return self.max_output - self.generated

    @property
    def context_done(self) -> bool:
        return self.num_computed >= self.ctx_len

    def set_total_blocks(self, block_size: int) -> None:
        """Blocks the request holds at completion: ``ceil((prompt + max_output) / bs)``."""
        self.total_blocks = -(-(self.prompt_len + self.max_output) // block_size)

    # -- block identities -----------------------------------------------------------------

    def hashes(self, n_blocks: int, block_size: int) -> tuple[list[int], list[int]]:
        """``(sequence_hashes, local_hashes)`` covering at least the first ``n_blocks`` full
        blocks of the sequence (callers slice; lists may be longer)."""
        seq = self._seq_hashes
        if seq is None:
            prompt_seq, prompt_local = self.request.prompt.block_hashes(block_size)
            seq = self._seq_hashes = list(prompt_seq)
            self._local_hashes = list(prompt_local)
        local = self._local_hashes
        assert local is not None
        while len(seq) < n_blocks:
            i = len(seq)
            h = self._generated_block_hash(i, block_size)
            local.append(h)
            seq.append(chain_hash(seq[-1] if seq else None, h))
        return seq, local

    def _generated_block_hash(self, index: int, block_size: int) -> int:
        start = index * block_size
        return local_block_hash(self.tokens(start, start + block_size))

    def tokens(self, start: int, end: int) -> list[int]:
        """Known tokens ``[start, end)``: prompt, then generated (planned or pseudo)."""
        plen = self.prompt_len
        out = self.request.prompt.tokens(start, min(end, plen)) if start < plen else []
        g0 = max(start, plen) - plen
        g1 = end - plen
        if g1 > g0:
            planned = self.request.output_token_ids
            if planned is not None:
                out.extend(t & _MASK32 for t in planned[g0:g1])
            else:
                out.extend(range(self._base + g0, self._base + g1))
        return out

    def __repr__(self) -> str:
        return (
            f"TrtRequest({self.rid}, prompt={self.prompt_len}, gen={self.generated}/"
            f"{self.max_output}, computed={self.num_computed}, blocks={len(self.table)})"
        )
