"""What the server keeps of each request, and the report built from it.

A :class:`LiveRequest` is the live side of one request: the driver records its simulated
token times and wakes whoever streams it. The report is the one ``servesim run`` writes
(:func:`servesim.report.summary.build_report`), built from these records through a
:class:`~servesim.report.stats.RequestLog`; cancelled requests are not completed, count in
``failed`` (as in a split's replay, docs/report.md) and in ``num_cancelled``; requests
answered 503 never reach an engine and are counted in
``num_queue_full``. With reasoning configured the report gains the time to first answer token
(``*_ttfat_ms``: first token after the thinking span minus arrival).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from servesim.config.sections import ReportConfig
from servesim.report.stats import RequestLog, distribution
from servesim.report.summary import build_report, clean_floats, per_request_lines


class LiveRequest:
    """One request in the server. Times are simulated ms; -1.0 means "not yet"."""

    __slots__ = ("rid", "prompt_len", "max_tokens", "thinking", "arrival", "times", "steps", "cached",
                 "reused", "admitted", "worker", "dp_rank", "done_ms", "cancelled", "rejected", "aborted",
                 "push", "_waiter", "lora", "error", "injected")

    def __init__(self, rid: int, prompt_len: int, max_tokens: int, thinking: int, arrival: float) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.thinking = thinking  # output tokens in the thinking span (0 without reasoning)
        self.arrival = arrival
        self.times: list[float] = []  # one simulated time per output token
        self.steps: list[int] = []  # len(times) after each pass that gave the request tokens
        self.cached: int | None = None
        self.reused: int | None = None
        self.admitted = -1.0  # first admission (simulated ms)
        self.worker = -1
        self.dp_rank = -1
        self.done_ms = -1.0
        self.cancelled = False
        self.rejected = False
        self.aborted = False  # the simulation failed while the request was in flight
        self.push: Callable[[], bool] | None = None  # writes new tokens itself (streams.py)
        self._waiter: asyncio.Future[None] | None = None
        self.lora = 0  # the LoRA adapter id (0: the base model)
        # Why the engine failed the request (its worker crashed or was removed under it: an
        # elastic cluster, servesim_serve.elastic_driver); None otherwise. Set with rejected.
        self.error: str | None = None
        # Why an injected fault turned the request away on arrival (faults.rejections); None
        # otherwise. Set with rejected.
        self.injected: str | None = None

    @property
    def finished(self) -> bool:
        return self.done_ms >= 0.0 or self.cancelled or self.aborted

    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache at first admission."""
        value = self.cached if self.cached is not None else self.reused
        return value or 0

    def notify(self) -> None:
        """Tokens or the request's end arrived: :attr:`push` writes them, or else the stream
        waiting on the request is woken."""
        push = self.push
        if push is not None:
            try:
                if push():
                    return
            except Exception:
                self.push = None  # the stream's task takes over (and meets the error itself)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, seen: int) -> None:
        """Return once more than ``seen`` tokens exist or the request has finished."""
        while len(self.times) <= seen and not self.finished:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


def request_log(requests: Sequence[LiveRequest], max_in_flight: int, preemptions: int,
                record_token_times: bool) -> RequestLog:
    """The RequestLog of ``requests`` (request ids are their positions)."""
    log = RequestLog([r.prompt_len for r in requests], record_token_times=record_token_times)
    for r in requests:
        rid = r.rid
        log.arrival[rid] = r.arrival
        log.worker[rid] = r.worker
        log.dp_rank[rid] = r.dp_rank
        log.cached[rid] = r.cached
        if r.reused is not None:
            log.admission(rid, r.reused)
        for t in r.times:
            log.tokens([rid], t)
        # docs/report.md: `failed` counts the requests rejected and those cancelled, as the
        # replay of a split (and this server's split) logs a cancellation.
        log.rejected[rid] = r.rejected or r.cancelled
        if not r.cancelled:
            log.done[rid] = r.done_ms
    log.max_in_flight = max_in_flight
    log.num_preemptions = preemptions
    return log


def answer_latencies(requests: Sequence[LiveRequest]) -> list[float]:
    """Time to first answer token of the completed requests that reached their answer."""
    out = []
    for r in requests:
        if r.done_ms >= 0 and not r.cancelled and not r.rejected and len(r.times) > r.thinking:
            out.append(r.times[r.thinking] - r.arrival)
    return out


def live_report(requests: Sequence[LiveRequest], cfg: ReportConfig, resolved: dict[str, Any], *,
                max_in_flight: int, preemptions: int, queue_full: int,
                reasoning: bool, pools: Any = None, busy_ms: Sequence[float] = ()) -> dict[str, Any]:
    """The report of every request served so far (unfinished ones are not completed);
    ``pools``/``busy_ms``: the pools' spans and each worker's time in passes."""
    import numpy as np

    log = request_log(requests, max_in_flight, preemptions, record_token_times=False)
    report = build_report(log, cfg, resolved)
    extra: dict[str, Any] = {
        "num_cancelled": sum(1 for r in requests if r.cancelled),
        "num_queue_full": queue_full,
        "num_unfinished": sum(1 for r in requests if not r.finished),
        "num_aborted": sum(1 for r in requests if r.aborted),
    }
    if reasoning:
        extra.update(distribution("ttfat", np.asarray(answer_latencies(requests)), cfg.percentiles))
    if pools is not None:  # cluster.pools: the replay's per-pool section
        from servesim.replay.pools import pool_report

        extra["pools"] = pool_report(log, pools, busy_ms, cfg.percentiles)
    report.update(clean_floats(extra))
    return report


def live_per_request_lines(requests: Sequence[LiveRequest], max_in_flight: int,
                           preemptions: int) -> list[str]:
    """One JSON line per request (``servesim run --per-request``'s fields plus ``cancelled``)."""
    log = request_log(requests, max_in_flight, preemptions, record_token_times=True)
    log.extra = {"cancelled": [r.cancelled for r in requests]}
    return [line + "\n" for line in per_request_lines(log)]
