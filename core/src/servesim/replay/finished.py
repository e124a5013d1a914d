"""A request at its end, as the ``servesim_request_finished`` hook receives it."""

from __future__ import annotations

from attrs import frozen


@frozen
class FinishedRequest:
    """One request at its end (``servesim_request_finished``). Times are simulated ms;
    ``first_token_ms`` is -1 for a request that produced no token; ``cached_tokens`` is None
    when the engine never reported its prefix hit."""

    request_id: int
    session_id: str
    worker_id: int
    dp_rank: int
    arrival_ms: float
    first_token_ms: float
    finished_ms: float
    input_tokens: int
    output_tokens: int
    cached_tokens: int | None
    rejected: bool
