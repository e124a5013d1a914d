"""Per-request scheduler state of the SGLang rank."""

from __future__ import annotations

from servesim.contract import Request

from servesim_sglang.radix_cache import KvLease

_MASK32 = 0xFFFFFFFF


def synthetic_token(request_id: int, index: int) -> int:
    """A deterministic stand-in for the ``index``-th generated token of a request.

    Only its identity matters (it enters the radix cache, so two requests share decode pages
    only if they share outputs); any fixed function works. Chosen cheap and seed-free.
    """
    return (request_id * 0x9E3779B1 + index * 0x85EBCA77 + 0x632BE5AB) & _MASK32


class SglangRequest:
    """``tokens`` is the prompt plus generated tokens; ``materialized`` counts tokens whose
    KV the request owns (dynamo-mocker.md §5: a retracted request re-prefills all of them)."""

    __slots__ = (
        "rid",
        "request",
        "tokens",
        "prompt_len",
        "max_out",
        "output_ids",
        "materialized",
        "lease",
        "cached_tokens",
        "first_output_sent",
        "output_len",
        "remaining_output",
        "inflight",
        "entry_seq",
        "seen_prefix",
    )

    def __init__(self, request: Request) -> None:
        self.rid = request.request_id
        self.request = request
        self.tokens: list[int] = request.prompt.tokens(0, None)
        self.prompt_len = len(self.tokens)
        self.max_out = request.planned_output_tokens
        self.output_ids = request.output_token_ids
        self.materialized = 0
        self.lease: KvLease | None = None
        self.cached_tokens: int | None = None
        self.first_output_sent = False
        # plain attributes, kept by append_token: read on every pass for every request
        self.output_len = 0
        self.remaining_output = self.max_out
        # Tokens emitted whose result the scheduler has not processed yet (overlap loop,
        # servesim_sglang.overlap); 0 otherwise.
        self.inflight = 0
        # The order in which requests entered the waiting queue (each retraction re-enters
        # it), and the prefix its last admission attempt matched (SGLang's ``prefix_len``,
        # 0 after a retraction); read by servesim_sglang.priority only.
        self.entry_seq = 0
        self.seen_prefix = 0

    @property
    def seq_len(self) -> int:
        return len(self.tokens)

    @property
    def allocated_pages(self) -> int:
        """Pages of KV the request references (0 when it holds none)."""
        return self.lease.pages if self.lease is not None else 0

    def append_token(self, token: int) -> None:
        self.tokens.append(token)
        self.output_len += 1
        self.remaining_output -= 1

    def next_token(self) -> int:
        i = self.output_len
        if self.output_ids is not None and i < len(self.output_ids):
            return self.output_ids[i]
        return synthetic_token(self.rid, i)

    def __repr__(self) -> str:
        return f"SglangRequest({self.rid}, len={self.seq_len}, out={self.output_len}/{self.max_out})"
