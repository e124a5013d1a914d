"""Per-request scheduler state of the trtllm rank.

A request's sequence is its prompt followed by the tokens it generated. ``num_computed``
counts tokens whose KV is written; the newest sampled token is "dangling" until the next
step computes it (dynamo-mocker.md §2.3: a decoding request uses one budget token).
``ctx_len`` is the context the request must (re)compute before it samples: the prompt, or,
after a MAX_UTILIZATION pause, prompt + generated (TensorRT-LLM's ``LlmRequest::pause``
moves the generated tokens into the prompt).

Block identities (dynamo-mocker.md §2.6, §3.1): prompt blocks hash their tokens through the
prompt's :class:`~servesim.tokens.TokenSeq`. A block holding generated tokens gets a
deterministic per-request identity instead of hashing sampled tokens: the reference samples
random token ids, so such blocks are never shared across requests either, and servesim
avoids materialising per-token values (DESIGN.md §7). With planned ``output_token_ids`` the
real tokens are hashed, so two requests with equal planned outputs do share blocks.
"""

from __future__ import annotations

import struct

from servesim.contract import Request
from servesim.kv.hashing import SEED, chain_hash, local_block_hash
from servesim.kv.pool import BlockTable
from xxhash import xxh3_64_intdigest

_IDENTITY = struct.Struct("<QQQ")
_GENERATED_TAG = 0x7472746C6C6D  # "trtllm": keeps synthetic identities off real token hashes


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
        "_salt",
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
        self._salt = salt

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
        planned = self.request.output_token_ids
        if planned is not None:
            tail = self.request.prompt.tokens(start, min(self.prompt_len, start + block_size))
            head = max(0, start - self.prompt_len)
            need = block_size - len(tail)
            return local_block_hash(tail + list(planned[head : head + need]))
        return xxh3_64_intdigest(_IDENTITY.pack(_GENERATED_TAG, self._salt, index), seed=SEED)

    def __repr__(self) -> str:
        return (
            f"TrtRequest({self.rid}, prompt={self.prompt_len}, gen={self.generated}/"
            f"{self.max_output}, computed={self.num_computed}, blocks={len(self.table)})"
        )
