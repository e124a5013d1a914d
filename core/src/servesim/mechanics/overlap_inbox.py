"""New requests an overlapped engine loop has not read yet.

Some engine loops choose the next pass while the current one runs on the GPU:

* TensorRT-LLM's PyTorch executor with its overlap scheduler (``disable_overlap_scheduler``
  false, TensorRT-LLM's default; ``PyExecutor._executor_loop_overlap`` in
  ``tensorrt_llm/_torch/pyexecutor/py_executor.py``);
* vLLM's async scheduling (``EngineCore.step_with_batch_queue`` in ``vllm/v1/engine/core.py``
  with two batches in flight).

Each iteration of such a loop fetches new requests, schedules and launches pass k+1, then
waits for pass k to finish and processes its results (tokens and completions go to the
client then). So pass k+1 is chosen when pass k starts, from the requests read by then: a
request that arrives while pass k-1 runs misses pass k, which was already chosen, and joins
pass k+1 at the earliest. Without the overlap it would join pass k.

The rule, at the start of a pass P at time T, for a request that reached the rank at time t:

* if the rank has nothing else to run, or the pass before P did not end at T (the loop
  waited idle and read the request at once), the request is read now and can join P;
* otherwise it can join P only if ``t`` is earlier than the start of the pass before P.

A request that arrives at the very instant a pass starts was not read for the pass after it:
the loop reads the moment it has processed the previous pass's results, and a client that
answers a completion of that pass (a closed-loop benchmark client) sends its next request
only after receiving it.

Not modelled: a request whose last token is still in flight keeps its slot and KV until the
loop has processed that token, a pass later (TensorRT-LLM leaves it out of the next step,
``_update_generation_requests_that_will_complete_next_iteration``; vLLM schedules a request
that stops on an end token once more). A cancelled request that is still unread leaves the
inbox.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class OverlapInbox(Generic[T]):
    """One rank's unread requests and the times of its last pass."""

    __slots__ = ("held", "last_start", "last_end")

    def __init__(self) -> None:
        self.held: list[tuple[float, int, T]] = []  # (arrival, request id, request)
        self.last_start = -math.inf
        self.last_end = -math.inf

    def __len__(self) -> int:
        return len(self.held)

    def hold(self, arrival_ms: float, request_id: int, request: T) -> None:
        """A request reached the rank at ``arrival_ms``."""
        self.held.append((arrival_ms, request_id, request))

    def holds(self, request_id: int) -> bool:
        return any(rid == request_id for _, rid, _ in self.held)

    def drop(self, request_id: int) -> bool:
        """Forget an unread request (a cancel); whether it was here."""
        kept = [h for h in self.held if h[1] != request_id]
        dropped = len(kept) != len(self.held)
        self.held = kept
        return dropped

    def pass_starts(self, now_ms: float, busy: bool) -> list[T]:
        """A pass starts at ``now_ms``: the requests read in time to join it, in arrival
        order (the module's rule; ``busy``: the rank has other requests to run)."""
        held = self.held
        if held:
            if not busy or self.last_end != now_ms:
                read = [req for _, _, req in held]
                self.held = []
            else:
                cut = self.last_start
                read = [req for t, _, req in held if t < cut]
                if read:
                    self.held = [h for h in held if h[0] >= cut]
        else:
            read = []
        self.last_start = now_ms
        return read

    def pass_ends(self, end_ms: float) -> None:
        self.last_end = end_ms

    def run_ends(self, started_at_ms: float, ends: Sequence[float]) -> None:
        """A run of back-to-back passes that began at ``started_at_ms`` ended (``ends``: each
        pass's end): its last pass began where the one before it ended."""
        self.last_start = ends[-2] if len(ends) > 1 else started_at_ms
        self.last_end = ends[-1]
