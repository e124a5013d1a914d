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
them becomes full and needs its hash (docs/architecture.md, "Speed by design").
"""

from __future__ import annotations

from servesim.contract import Request
from servesim.kv.pool import BlockTable
from servesim.kv.sequence import SequenceBlocks


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
        "blocks",
        "sb",
        "se",
        "sn",
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
        self.table = BlockTable(self.prompt_len)
        self.cached_tokens = 0  # prefix-cache hit of the current (re)admission
        self.first_cached: int | None = None  # hit at first admission (Output.cached_tokens)
        self.first_output_sent = False
        self.started = False  # holds KV blocks (context begun or decoding)
        self.paused = False  # paused by MAX_UTILIZATION; waits to be re-admitted
        self.reject = False
        self.total_blocks = 0
        self.blocks = SequenceBlocks(request, salt)
        # Sequence length minus the pass counter, end pass and batch serial while the
        # request is in a steady batch (servesim_trtllm.fast.steady); meaningless otherwise.
        self.sb = 0
        self.se = 0
        self.sn = 0

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
        return self.blocks.hashes(n_blocks, block_size)

    def tokens(self, start: int, end: int) -> list[int]:
        """Known tokens ``[start, end)``: prompt, then generated (planned or pseudo)."""
        return self.blocks.tokens(start, end)

    def __repr__(self) -> str:
        return (
            f"TrtRequest({self.rid}, prompt={self.prompt_len}, gen={self.generated}/"
            f"{self.max_output}, computed={self.num_computed}, blocks={len(self.table)})"
        )
