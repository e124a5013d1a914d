"""What one step scheduled, collected while the policies run and priced afterwards."""

from __future__ import annotations

from attrs import define, field
from servesim.contract import Admission, PressureEvent, RequestId

from servesim_trtllm.request import TrtRequest


@define(slots=True)
class StepWork:
    """Scheduled requests in execution order, with context-prefill accounting.

    ``contexts`` holds ``(request, prompt_before, prompt_tokens, tokens)`` for every request that
    computed context tokens or was admitted this step, after dynamo-mocker.md §2.3
    ``ScheduledWork``: context tokens already computed or cached before this step, and
    context tokens computed in it. Every other scheduled request is a one-token decode
    (kept as bare list entries: this is the hot path).
    """

    scheduled: list[TrtRequest] = field(factory=list)
    tokens: list[int] = field(factory=list)
    contexts: list[tuple[TrtRequest, int, int, int]] = field(factory=list)
    context_ids: set[RequestId] = field(factory=set)
    admissions: list[Admission] = field(factory=list)
    new_hits: dict[RequestId, int] = field(factory=dict)
    resumed: list[RequestId] = field(factory=list)
    pressure: list[PressureEvent] = field(factory=list)
    paused: list[RequestId] = field(factory=list)
    rejected: list[TrtRequest] = field(factory=list)
    to_finalize: list[TrtRequest] = field(factory=list)

    def record_context(self, r: TrtRequest, tokens: int, prompt_before: int, prompt_tokens: int) -> None:
        self.scheduled.append(r)
        self.tokens.append(tokens)
        self.contexts.append((r, prompt_before, prompt_tokens, tokens))
        self.context_ids.add(r.rid)

    @property
    def prefilled(self) -> bool:
        return any(pt > 0 for _, _, pt, _ in self.contexts)
