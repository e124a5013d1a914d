"""What one step scheduled, collected while the policies run and priced afterwards."""

from __future__ import annotations

from attrs import define, field
from servesim.contract import Admission, PressureEvent, RequestId

from servesim_trtllm.request import TrtRequest


@define(slots=True)
class StepWork:
    """Scheduled requests in execution order, with their context-prefill accounting.

    ``prompt_before`` / ``prompt_tokens`` follow dynamo-mocker.md §2.3 ``ScheduledWork``:
    context tokens already computed or cached before this step, and context tokens computed
    in it. A request with ``prompt_tokens == 0`` is a decode.
    """

    scheduled: list[TrtRequest] = field(factory=list)
    tokens: list[int] = field(factory=list)
    prompt_before: list[int] = field(factory=list)
    prompt_tokens: list[int] = field(factory=list)
    was_decoding: list[bool] = field(factory=list)
    seq_len: list[int] = field(factory=list)
    admissions: list[Admission] = field(factory=list)
    new_hits: dict[RequestId, int] = field(factory=dict)
    resumed: list[RequestId] = field(factory=list)
    pressure: list[PressureEvent] = field(factory=list)
    paused: list[RequestId] = field(factory=list)
    rejected: list[TrtRequest] = field(factory=list)
    allocation_failures: int = 0

    def record(
        self, r: TrtRequest, tokens: int, prompt_before: int, prompt_tokens: int, decoding: bool
    ) -> None:
        self.scheduled.append(r)
        self.tokens.append(tokens)
        self.prompt_before.append(prompt_before)
        self.prompt_tokens.append(prompt_tokens)
        self.was_decoding.append(decoding)
        self.seq_len.append(r.seq_len)
