"""What one pass of the SGLang scheduler produced (:class:`PassOutcome`): built by
``SglangScheduler.run_pass`` (servesim_sglang.scheduler), by its helpers (``admission``,
``overlap``, ``retraction``, ``speculative``) and by runs of passes (``fast.runs``), and
turned into contract effects by the rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servesim.contract import Admission, PressureEvent


class PassOutcome:
    """Everything one pass produced; the rank turns it into contract effects.

    ``prefill_items`` rows are ``(prompt_len, tokens computed, prefix before the chunk, radix
    reuse credited)``. A plain slots class: one is built per pass.
    """

    __slots__ = (
        "end_ms",
        "admissions",
        "pressure",
        "token_rids",
        "token_ids",
        "completed",
        "cached_tokens",
        "prefill_items",
        "decode_lens",
        "scheduled",
        "retracted",
        "resumed",
        "rejected",
        "prefill_pass",
        "model_work",
        "decode_forwards",
        "running_before",
        "finished",
        "running_batch",
        "mixed_decode",
    )

    def __init__(self, end_ms: float) -> None:
        self.end_ms = end_ms
        self.admissions: list[Admission] = []
        self.pressure: list[PressureEvent] = []
        self.token_rids: list[int] = []
        self.token_ids: list[int] = []
        self.completed: list[int] = []
        self.cached_tokens: dict[int, int] = {}
        self.prefill_items: list[tuple[int, int, int, int]] = []
        self.decode_lens: list[int] = []
        self.scheduled: dict[int, int] = {}
        self.retracted: list[int] = []
        self.resumed: list[int] = []
        self.rejected: list[int] = []
        self.prefill_pass = False
        self.model_work = False
        self.decode_forwards = 0
        self.running_before = 0  # decoding requests when the pass began (pass log)
        # Requests whose finish the scheduler processed in this pass (pass log): the
        # completions of the pass, or with the overlap loop those of the pass before.
        self.finished: list[int] = []
        self.running_batch: int | None = None  # pass log override (overlap's skipped decode)
        # The running requests that decoded in this prefill pass (servesim_sglang.mixed).
        self.mixed_decode: list[int] = []


__all__ = ["PassOutcome"]
