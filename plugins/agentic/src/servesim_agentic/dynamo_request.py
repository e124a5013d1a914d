"""The ``dynamo_request_trace`` format: Dynamo's request trace (``dynamo.request.trace.v1``),
what Dynamo 1.6.1's replay reads as ``trace_format: dynamo``, lowered as it lowers it
(aisimulate ``replay/loadgen``, ``DynamoRequestTrace::from_request_trace_files``).

One JSON record per line, or ``{"event": record}``; blank lines skipped. Records of type
``request_payload`` and ``tool_start`` are skipped; ``request_end``, ``tool_end`` and
``tool_error`` are read, and each must carry ``schema: "dynamo.request.trace.v1"``.
A ``request_end`` holds ``event_time_unix_ms`` and ``request``: ``request_id`` (unique),
``output_tokens``, optional ``request_received_ms`` and ``total_time_ms`` (the request's start
and duration; without them the end is the event time), optional ``model``, and ``replay``:
``trace_block_size`` (the same on every request), ``input_length``, ``input_sequence_hashes``.
Its optional ``agent_context`` (``session_id``, ``parent_session_id``) makes the trace agentic;
a trace mixes no requests with and without it.

Without agent contexts every request is its own session at its start, less the first start.
With them, requests are ordered by (start, end, id); each session's requests form a chain
(each waits for its predecessor's finish, by their recorded gap); a child session
(``parent_session_id``) is spawned by its parent's request: the one a ``tool_end`` record's
``tool.claude`` names (``source_request_id``; ``execution_mode`` ``blocking`` or
``background``; its ``consumer_request_id``, if any, joins the child's last-finishing request),
else the parent's latest request starting by the child's first start, and the child's
last-finishing request then joins the parent's first request starting after it ends. A spawn
is dispatch-triggered (the gap from the spawner's start), a join completion-triggered; a
request with no dependency is released at its start less the first start. The rows then
release as ``servesim.replay.edge_release`` describes.
"""

from __future__ import annotations

import math
from typing import Any

from attrs import define
from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload

from servesim_agentic.agentic_v2 import V2Row, build_v2_workload
from servesim_agentic.graph import json_lines

SCHEMA = "dynamo.request.trace.v1"


@define
class Entry:
    line: int
    start: int
    end: int
    request_id: str
    session: str | None
    parent: str | None
    model: str | None
    output: int
    input_length: int
    hashes: list[int]
    block: int


@define
class Tool:
    line: int
    session: str
    source: str
    consumer: str | None
    child: str | None
    tool_call_id: str


def _uint(v: Any, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"field {key!r}: expected an integer >= 0, got {v!r}")
    return v


def _text(v: Any, key: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"field {key!r}: expected a non-empty string, got {v!r}")
    return v


def _duration(v: Any, key: str) -> int | None:
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ValueError(f"field {key!r}: expected a finite number >= 0, got {v!r}")
    return math.floor(v + 0.5)  # Rust's f64::round, half away from zero (v >= 0)


def _record(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    ev = obj.get("event", obj)
    kind = ev.get("event_type") if isinstance(ev, dict) else None
    if kind is None:
        kind = obj.get("event_type")
    if kind in ("request_payload", "tool_start"):
        return None
    if kind not in ("request_end", "tool_end", "tool_error"):
        raise ValueError(f"field 'event_type': expected request_end, tool_end or tool_error "
                         f"(request_payload and tool_start are skipped), got {kind!r}")
    schema = ev.get("schema") if isinstance(ev, dict) else None
    if schema != SCHEMA:
        raise ValueError(f"field 'schema': expected {SCHEMA!r}, got {schema!r}")
    return ev


def _entry(ev: dict[str, Any], line: int) -> Entry:
    at = _uint(ev.get("event_time_unix_ms"), "event_time_unix_ms")
    req = ev.get("request")
    if not isinstance(req, dict):
        raise ValueError("field 'request': a request_end needs its request metrics")
    rid = _text(req.get("request_id"), "request.request_id")
    total = _duration(req.get("total_time_ms"), "request.total_time_ms")
    received = req.get("request_received_ms")
    if received is not None:
        received = _uint(received, "request.request_received_ms")
    end = received + total if received is not None and total is not None else at
    start = received if received is not None else max(at - (total or 0), 0)
    replay = req.get("replay")
    if not isinstance(replay, dict):
        raise ValueError("field 'request.replay': expected an object")
    block = _uint(replay.get("trace_block_size"), "request.replay.trace_block_size")
    if block == 0:
        raise ValueError("field 'request.replay.trace_block_size': must be positive")
    hashes = replay.get("input_sequence_hashes")
    if not isinstance(hashes, list) or any(not isinstance(h, int) or isinstance(h, bool) or h < 0
                                           for h in hashes):
        raise ValueError(f"field 'request.replay.input_sequence_hashes': expected a list of "
                         f"integers >= 0, got {hashes!r}")
    if req.get("output_tokens") is None:
        raise ValueError("missing required field 'request.output_tokens'")
    ctx = ev.get("agent_context")
    session = parent = None
    if ctx is not None:
        if not isinstance(ctx, dict):
            raise ValueError("field 'agent_context': expected an object")
        session = _text(ctx.get("session_id"), "agent_context.session_id")
        if ctx.get("parent_session_id") is not None:
            parent = _text(ctx["parent_session_id"], "agent_context.parent_session_id")
    model = req.get("model")
    return Entry(line, start, end, rid, session, parent, model if isinstance(model, str) else None,
                 _uint(req["output_tokens"], "request.output_tokens"),
                 _uint(replay.get("input_length"), "request.replay.input_length"), hashes, block)


def _tool(ev: dict[str, Any], line: int) -> Tool | None:
    ctx, tool = ev.get("agent_context"), ev.get("tool")
    if not isinstance(ctx, dict) or not isinstance(tool, dict):
        return None
    session = _text(ctx.get("session_id"), "agent_context.session_id")
    call = _text(tool.get("tool_call_id"), "tool.tool_call_id")
    _text(tool.get("tool_class"), "tool.tool_class")
    _duration(tool.get("duration_ms"), "tool.duration_ms")
    claude = tool.get("claude")
    if claude is None:
        return None
    if not isinstance(claude, dict):
        raise ValueError("field 'tool.claude': expected an object")
    if claude.get("execution_mode") not in ("blocking", "background"):
        raise ValueError(f"field 'tool.claude.execution_mode': expected 'blocking' or 'background', "
                         f"got {claude.get('execution_mode')!r}")
    source = _text(claude.get("source_request_id"), "tool.claude.source_request_id")
    consumer = claude.get("consumer_request_id")
    child = claude.get("child_session_id")
    return Tool(line, session, source, consumer if isinstance(consumer, str) else None,
                child if isinstance(child, str) else None, call)


def _read(path: str) -> tuple[list[Entry], list[Tool]]:
    entries: list[Entry] = []
    tools: list[Tool] = []
    seen: dict[str, int] = {}
    for line, obj in json_lines(path):
        try:
            ev = _record(obj)
            if ev is None:
                continue
            if ev["event_type"] == "request_end":
                e = _entry(ev, line)
                if e.request_id in seen:
                    raise ValueError(f"field 'request.request_id': {e.request_id!r} is used twice "
                                     f"(first on line {seen[e.request_id]})")
                seen[e.request_id] = line
                entries.append(e)
            else:
                t = _tool(ev, line)
                if t is not None:
                    tools.append(t)
        except ValueError as exc:
            raise TraceError(str(exc), file=path, line=line) from None
    if not entries:
        raise TraceError("the trace has no request_end records", file=path)
    return entries, tools


def _edge(entries: list[Entry], src: int, dst: int, dispatch: bool) -> tuple[str, bool, float]:
    at = entries[src].start if dispatch else entries[src].end
    return entries[src].request_id, dispatch, float(entries[dst].start - at)


def _push(deps: list[tuple[str, bool, float]], e: tuple[str, bool, float]) -> None:
    if not any(d[0] == e[0] and d[1] == e[1] for d in deps):
        deps.append(e)


class DynamoRequestTrace:
    """Reader registered as the ``dynamo_request_trace`` format."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int = 512,
             options: dict[str, Any] | None = None) -> Workload:
        entries, tools = _read(path)
        block = entries[0].block
        for e in entries:
            if e.block != block:
                raise TraceError(f"field 'request.replay.trace_block_size': {e.block} differs from "
                                 f"the first request's {block}", file=path, line=e.line)
        with_ctx = sum(e.session is not None for e in entries)
        if with_ctx not in (0, len(entries)):
            # the first request (in file order) that differs from the first one
            bad = next(e for e in entries if (e.session is None) != (entries[0].session is None))
            raise TraceError("field 'agent_context': a trace mixes requests with and without it",
                             file=path, line=bad.line)
        entries.sort(key=lambda e: (e.start, e.end, e.request_id))
        first = min(e.start for e in entries)
        if not with_ctx:
            return _standard(entries, first, block, path)
        return build_v2_workload(_agentic_rows(entries, tools, first, path), path, block)


def _standard(entries: list[Entry], first: int, block: int, path: str) -> Workload:
    sessions = []
    for rid, e in enumerate(entries):
        full = len(e.hashes) * block
        if e.input_length > full:
            raise TraceError(f"field 'request.replay.input_length': {e.input_length} is more than "
                             f"the {len(e.hashes)} hashes of {block} tokens hold", file=path, line=e.line)
        turn = Turn(rid, RepeatedBlockTokens(e.hashes, block, e.input_length), e.output, 0.0, e.line)
        sessions.append(Session(e.request_id, float(e.start - first), [turn]))
    return make_workload(sessions, path)


def _agentic_rows(entries: list[Entry], tools: list[Tool], first: int, path: str) -> list[V2Row]:
    index = {e.request_id: i for i, e in enumerate(entries)}
    by_session: dict[str, list[int]] = {}
    parent_of: dict[str, str] = {}
    for i, e in enumerate(entries):
        assert e.session is not None
        by_session.setdefault(e.session, []).append(i)
        if e.parent is not None:
            if parent_of.setdefault(e.session, e.parent) != e.parent:
                raise TraceError(f"field 'agent_context.parent_session_id': session {e.session!r} "
                                 f"has parents {parent_of[e.session]!r} and {e.parent!r}",
                                 file=path, line=e.line)
    deps: list[list[tuple[str, bool, float]]] = [[] for _ in entries]
    for idx in by_session.values():
        for a, b in zip(idx, idx[1:], strict=False):
            _push(deps[b], _edge(entries, a, b, False))
    explicit: dict[str, Tool] = {}
    for t in tools:
        for key, rid in (("source_request_id", t.source), ("consumer_request_id", t.consumer)):
            if rid is None:
                continue
            if rid not in index:
                raise TraceError(f"field 'tool.claude.{key}': no request {rid!r} in the trace",
                                 file=path, line=t.line)
            if entries[index[rid]].session != t.session:
                raise TraceError(f"field 'tool.claude.{key}': request {rid!r} belongs to session "
                                 f"{entries[index[rid]].session!r}, not {t.session!r}",
                                 file=path, line=t.line)
        if t.child is None or t.child not in by_session:
            continue
        if t.child in explicit:
            raise TraceError(f"field 'tool.claude.child_session_id': session {t.child!r} is named "
                             "by two tool records", file=path, line=t.line)
        explicit[t.child] = t
    for child, parent in parent_of.items():
        kids = by_session[child]
        if parent not in by_session:
            raise TraceError(f"field 'agent_context.parent_session_id': no session {parent!r} in "
                             "the trace", file=path, line=entries[kids[0]].line)
        parents = by_session[parent]
        first_child = kids[0]
        last_child = max(kids, key=lambda i: (entries[i].end, entries[i].start, entries[i].request_id))
        tool = explicit.get(child)
        if tool is not None:
            spawn = index[tool.source]
            if spawn not in parents:
                raise TraceError(f"field 'tool.claude.source_request_id': {tool.source!r} is not in "
                                 f"the parent session {parent!r}", file=path, line=tool.line)
            _push(deps[first_child], _edge(entries, spawn, first_child, True))
            if tool.consumer is not None:
                join = index[tool.consumer]
                if join not in parents:
                    raise TraceError(f"field 'tool.claude.consumer_request_id': {tool.consumer!r} "
                                     f"is not in the parent session {parent!r}", file=path, line=tool.line)
                _push(deps[join], _edge(entries, last_child, join, False))
            continue
        before = [i for i in parents if entries[i].start <= entries[first_child].start]
        if before:
            latest = max(entries[i].start for i in before)
            spawn = [i for i in before if entries[i].start == latest][-1]  # Rust max_by_key: last
            _push(deps[first_child], _edge(entries, spawn, first_child, True))
        after = [i for i in parents if entries[i].start >= entries[last_child].end]
        if after:
            join = min(after, key=lambda i: entries[i].start)  # Rust min_by_key: first
            _push(deps[join], _edge(entries, last_child, join, False))
    rows = []
    for i, e in enumerate(entries):
        rows.append(V2Row(e.line, e.request_id, e.session or "", _play(e, parent_of), e.hashes,
                          e.output, float(e.start - first) if not deps[i] else 0.0, e.input_length,
                          deps=deps[i]))
    return rows


def _play(e: Entry, parent_of: dict[str, str]) -> str:
    """The root session of ``e``'s session tree (dependencies never leave it)."""
    s = e.session or ""
    seen = {s}
    while s in parent_of and parent_of[s] not in seen:
        s = parent_of[s]
        seen.add(s)
    return s


__all__ = ["DynamoRequestTrace"]
