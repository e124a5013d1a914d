"""What one pass of the vLLM scheduler produced (:class:`PassResult`), with each scheduled
request's work in it (:class:`Work`): built by ``VllmScheduler.run_pass``
(servesim_vllm.scheduler) and read by the rank and the pass's helpers (``shape``,
``speculative``, ``host_offload``, ``fast.steady``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.contract import Admission, PressureEvent, RequestId

    from servesim_vllm.request import VllmRequest


class Work:
    """What one request did in this pass (the reference's ``ScheduledWork``)."""

    __slots__ = ("req", "tokens", "prompt_tokens", "prefix_tokens", "seq_len", "terminal")

    def __init__(self, req: VllmRequest, tokens: int, prompt_tokens: int, prefix: int) -> None:
        self.req = req
        self.tokens = tokens
        self.prompt_tokens = prompt_tokens
        self.prefix_tokens = prefix
        self.seq_len = req.length
        self.terminal = False  # finished without sampling (nothing left to generate)


class PassResult:
    """Everything one pass produced; the rank turns it into contract effects."""

    __slots__ = (
        "order",
        "work",
        "admissions",
        "new_hits",
        "resumed",
        "pressure",
        "token_rids",
        "completed",
        "rejected",
        "cached_tokens",
        "prefill_ms",
        "decode_ms",
        "decoders",
        "decode_stats",
        "later",
        "plain",
        "priced",
    )

    def __init__(self) -> None:
        # Every request scheduled this pass, in batch order; ``work`` holds the details of
        # those that did more than a plain one-token decode step (prefill chunks,
        # recomputation after preemption, block allocation or finalisation).
        self.order: list[VllmRequest] = []
        self.work: dict[RequestId, Work] = {}
        self.admissions: list[Admission] = []
        self.new_hits: dict[RequestId, int] = {}
        self.resumed: list[RequestId] = []
        self.pressure: list[PressureEvent] = []
        self.token_rids: list[RequestId] = []
        self.completed: list[RequestId] = []
        self.rejected: list[RequestId] = []
        self.cached_tokens: dict[RequestId, int] = {}
        self.prefill_ms = 0.0
        self.decode_ms = 0.0
        self.decoders = 0
        # (count, sum, sum of squares) of scheduled decode lengths, for forward-pass metrics.
        self.decode_stats = (0, 0, 0)
        # Requests ``_emit`` must visit, in batch order: every one with ``work`` and the plain
        # decoders whose token (taken at scheduling) completes them.
        self.later: list[VllmRequest] = []
        # [count, sum, sum of squares] of the plain decoders' pre-pass lengths.
        self.plain = [0, 0, 0]
        # For a timing model that prices pass shapes: rid -> length of each request with
        # ``work`` that the decode call prices (servesim_vllm.shape).
        self.priced: dict[RequestId, int] | None = None


__all__ = ["PassResult", "Work"]
