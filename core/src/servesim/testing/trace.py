"""The conformance kit's recording driver and KV-event replay.

:func:`run_trace` drives one engine through the canonical loop of aisimulate-engine.md §12
(deliver due arrivals, settle due internal work, start a pass, deliver arrivals that fall
inside it, complete it at its modelled end) and records everything the engine made visible
into a :class:`Trace`, noting contract violations it can see pass by pass in
``trace.failures``. :func:`kv_event_problems` replays KV events onto empty per-rank sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from attrs import define, field

from servesim.contract import (
    ClearedBlocks,
    KvEvent,
    Metrics,
    PassCompletionEffects,
    RemovedBlocks,
    Request,
    StoredBlocks,
    Submit,
)
from servesim.engine import Engine

__all__ = ["Trace", "kv_event_problems", "run_trace"]


@define
class Trace:
    """Everything a run made visible, in order; two identical runs give equal traces."""

    tokens: dict[int, list[float]] = field(factory=dict)
    token_ids: dict[int, list[int]] = field(factory=dict)
    terminals: dict[int, list[tuple[float, bool]]] = field(factory=dict)
    passes: list[tuple[int, float, float]] = field(factory=list)
    admissions: list[tuple[float, int, int]] = field(factory=list)
    kv_events: list[tuple[int, float, KvEvent]] = field(factory=list)
    metrics: dict[int, Metrics] = field(factory=dict)
    drained: bool = False
    end_ms: float = 0.0
    failures: list[str] = field(factory=list)


def run_trace(
    engine: Engine,
    arrivals: Iterable[tuple[float, Request]],
    *,
    max_passes: int = 100_000,
    mid_pass: Callable[[Engine, float, Trace], None] | None = None,
    already_submitted: Iterable[int] = (),
) -> Trace:
    """Drive ``engine`` until it drains, checking per-pass invariants into ``trace.failures``.

    Requests go to DP rank ``request_id % dp_size``. ``mid_pass(engine, now, trace)`` runs
    at the start time of each pass while it is in flight, before mid-pass arrivals.
    ``already_submitted`` names requests the caller submitted at 0 ms before the run.
    """
    trace = Trace()
    queue = sorted(((at, i, r) for i, (at, r) in enumerate(arrivals)), key=lambda e: e[:2])
    submitted: dict[int, float] = {}
    for rid in already_submitted:
        submitted[rid] = 0.0
        trace.tokens[rid] = []
        trace.terminals[rid] = []
    now, i = 0.0, 0
    for _ in range(max_passes):
        # Internal work due by now settles before a command at now (aisimulate-engine.md §9
        # "Driver obligation"), and again for what the arrivals made due.
        _settle_internal(engine, now, trace)
        i = _deliver(engine, queue, i, now, float("inf"), submitted, trace)
        _settle_internal(engine, now, trace)
        started = engine.execute_pass(now) if engine.is_ready() else None
        if started is None:
            if i < len(queue) or _next_deadline(engine) is not None:
                now = max(now, min(_pending_times(queue, i, engine)))
                continue
            trace.drained = engine.is_drained()
            trace.end_ms = now
            if not trace.drained:
                trace.failures.append(f"engine stalled at {now} ms: not ready, not drained, nothing due")
            return trace
        _record_start(started, submitted, trace)
        if mid_pass is not None:
            mid_pass(engine, now, trace)
        i = _deliver(engine, queue, i, now, started.end_ms, submitted, trace, in_flight=True)
        now = started.end_ms
        done = engine.complete_pass(started.pass_id, now)
        if done.end_ms != started.end_ms:
            trace.failures.append(f"pass {started.pass_id} completed at {done.end_ms}, not {started.end_ms}")
        for rc in done.by_rank:
            _record_completion(rc.dp_rank, rc.effects, started.started_at_ms, now, submitted, trace)
    trace.failures.append(f"no drain after {max_passes} passes (livelock?)")
    return trace


def _pending_times(queue: list, i: int, engine: Engine) -> list[float]:
    times = [queue[i][0]] if i < len(queue) else []
    deadline = _next_deadline(engine)
    if deadline is not None:
        times.append(deadline)
    return times


def _next_deadline(engine: Engine) -> float | None:
    return engine.next_internal_deadline_ms()


def _settle_internal(engine: Engine, now: float, trace: Trace) -> None:
    deadline = engine.next_internal_deadline_ms()
    if deadline is not None and deadline <= now:
        for dp_rank, eff in engine.process_internal_work(now):
            trace.kv_events.extend((dp_rank, now, e) for e in eff.kv_events)


def _deliver(
    engine: Engine,
    queue: list,
    i: int,
    now: float,
    before: float,
    submitted: dict[int, float],
    trace: Trace,
    *,
    in_flight: bool = False,
) -> int:
    """Submit arrivals due by ``now`` (idle) or before ``before`` (mid-pass)."""
    while i < len(queue) and (queue[i][0] <= now if not in_flight else queue[i][0] < before):
        at, _, req = queue[i]
        t = max(at, now)
        eff = engine.apply(req.request_id % engine.dp_size, Submit(req), t)
        submitted[req.request_id] = t
        trace.tokens.setdefault(req.request_id, [])
        trace.terminals.setdefault(req.request_id, [])
        leaked = [r for r in eff.retired_requests if r != req.request_id]
        if in_flight and leaked:
            trace.failures.append(
                f"Submit of request {req.request_id} mid-pass retired {leaked}: "
                "completion effects must stay hidden until complete_pass"
            )
        trace.kv_events.extend((e.dp_rank, t, e) for e in eff.kv_events)
        if eff.metrics is not None and not in_flight:
            trace.metrics[eff.metrics.dp_rank] = eff.metrics
        i += 1
    return i


def _record_start(started: Any, submitted: dict[int, float], trace: Trace) -> None:
    trace.passes.append((started.pass_id, started.started_at_ms, started.end_ms))
    for rs in started.by_rank:
        if not rs.rank_end_ms >= started.started_at_ms:
            trace.failures.append(f"rank {rs.dp_rank} pass ends at {rs.rank_end_ms} before its start")
        for adm in rs.effects.admissions:
            if adm.request_id not in submitted:
                trace.failures.append(f"pass {started.pass_id} admitted unknown request {adm.request_id}")
            trace.admissions.append((started.started_at_ms, adm.request_id, adm.reused_input_tokens))
        trace.kv_events.extend((rs.dp_rank, started.started_at_ms, e) for e in rs.effects.kv_events)


def _record_completion(
    dp_rank: int,
    eff: PassCompletionEffects,
    start: float,
    end: float,
    submitted: dict[int, float],
    trace: Trace,
) -> None:
    batch = eff.outputs
    ids = batch.token_ids
    if ids is not None and len(ids) != len(batch.token_request_ids):
        trace.failures.append(f"rank {dp_rank}: token_ids and token_request_ids differ in length")
    for k, rid in enumerate(batch.token_request_ids):
        if rid not in submitted:
            trace.failures.append(f"rank {dp_rank} emitted a token for unknown request {rid}")
            continue
        if submitted[rid] > start:
            trace.failures.append(
                f"request {rid} submitted at {submitted[rid]} got a token from the pass started at {start}"
            )
        if trace.terminals[rid]:
            trace.failures.append(f"request {rid} emitted a token at {end} after its terminal output")
        trace.tokens[rid].append(end)
        if ids is not None:
            trace.token_ids.setdefault(rid, []).append(ids[k])
    for rid in batch.completed:
        if rid not in submitted:
            trace.failures.append(f"rank {dp_rank} completed unknown request {rid}")
            continue
        trace.terminals[rid].append((end, rid in batch.rejected))
    for rid in batch.rejected:
        if rid not in batch.completed:
            trace.failures.append(f"request {rid} is rejected but not completed")
    trace.kv_events.extend((dp_rank, end, e) for e in eff.kv_events)
    if eff.metrics is not None:
        trace.metrics[dp_rank] = eff.metrics


def kv_event_problems(events: Iterable[tuple[int, float, KvEvent]]) -> list[str]:
    """Replay ``(dp_rank, at_ms, event)`` onto empty per-rank sets and report violations."""
    live: dict[int, set[int]] = {}
    last_id: dict[int, int] = {}
    out = []
    for dp_rank, at, ev in events:
        cached = live.setdefault(ev.dp_rank, set())
        if ev.dp_rank != dp_rank:
            out.append(f"event {ev.event_id} from rank {dp_rank} says dp_rank {ev.dp_rank}")
        if ev.dp_rank in last_id and ev.event_id <= last_id[ev.dp_rank]:
            out.append(f"rank {ev.dp_rank} event id {ev.event_id} at {at} ms does not rise "
                       f"after {last_id[ev.dp_rank]}")
        last_id[ev.dp_rank] = ev.event_id
        data = ev.data
        if isinstance(data, StoredBlocks):
            for b in data.blocks:
                if b.block_hash in cached:
                    out.append(f"rank {ev.dp_rank} stored block {b.block_hash} at {at} ms while it is live")
                cached.add(b.block_hash)
        elif isinstance(data, RemovedBlocks):
            for h in data.block_hashes:
                if h not in cached:
                    out.append(f"rank {ev.dp_rank} removed unknown block {h} at {at} ms")
                cached.discard(h)
        elif isinstance(data, ClearedBlocks):
            cached.clear()
    return out
