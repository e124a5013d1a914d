"""The ``dynamo_agent_trace`` format: Dynamo's own agent trace (``dynamo.agent.trace.v1``
JSONL records), lowered to agentic rows as Dynamo 1.6.1's ``agent_trace_to_mooncake
--agentic`` converter lowers them.

Each line is a record (or ``{"event": record}``); only ``request_end`` records (a request's
replay fields) and ``tool_end`` / ``tool_error`` records (a tool span) are used, the rest are
skipped. A ``request_end`` has ``event_time_unix_ms``, ``agent_context`` (``trajectory_id``,
optional ``parent_trajectory_id``) and ``request``: ``request_id``, ``output_tokens``,
``request_received_ms``, ``total_time_ms`` and ``replay`` (``trace_block_size``,
``input_length``, ``input_sequence_hashes``).

The lowering (the converter's rules):

* a request starts at ``request_received_ms`` (else the event time less ``total_time_ms``)
  and ends ``total_time_ms`` later (else at the event time); requests are ordered by
  (start, end, id) and the earliest start is time 0;
* each trajectory (``trajectory_id``; a request without context is its own) is a chain: a
  request waits for the previous one of its trajectory; the first has ``prefix_reset``;
* a child trajectory's first request waits for the parent's request that ended last at or
  before the child started (whose ``branches`` list it), and the parent's first request that
  starts at or after the child's last-finishing request ended waits for that request too;
* a request with dependencies waits, after the last of them ended, its recorded gap: the part
  of it covered by its trajectory's tool spans is ``tool_wait_ms``, the rest ``delay``;
* ``input_sequence_hashes`` (sequence-aware block hashes) become dense hash ids in order of
  first appearance, so equal prefixes stay equal; every request must share one
  ``trace_block_size``, which must be ``workload.trace.trace_block_size``.
"""

from __future__ import annotations

from typing import Any

from attrs import define
from servesim.errors import TraceError
from servesim.workload.model import Workload

from servesim_agentic.graph import Row, build_workload, finite_field, id_field, int_field, json_lines


@define
class _Request:
    line: int
    request_id: str
    start: int
    end: int
    trajectory: str
    parent: str | None
    output_tokens: int
    block_size: int
    input_length: int
    hashes: list[int]


def _request(rec: dict[str, Any], line: int) -> _Request:
    req = rec.get("request")
    if not isinstance(req, dict):
        raise ValueError("field 'request': a request_end record needs its request payload")
    replay = req.get("replay")
    if not isinstance(replay, dict):
        raise ValueError("field 'request.replay': the request has no replay fields")
    rid = id_field("request.request_id", req.get("request_id"))
    block = int_field("request.replay.trace_block_size", replay.get("trace_block_size"), 1)
    length = int_field("request.replay.input_length", replay.get("input_length"), 1)
    hashes = replay.get("input_sequence_hashes")
    if not isinstance(hashes, list) or not hashes:
        raise ValueError("field 'request.replay.input_sequence_hashes': expected a non-empty list")
    hashes = [int_field("request.replay.input_sequence_hashes", h) for h in hashes]
    if len(hashes) * block < length:
        raise ValueError(f"field 'request.replay.input_length': {length} exceeds the hashes' "
                         f"capacity {len(hashes) * block}")
    out = req.get("output_tokens")
    if out is None:
        raise ValueError("field 'request.output_tokens': the request has no output length")
    event = int_field("event_time_unix_ms", rec.get("event_time_unix_ms"))
    received = req.get("request_received_ms")
    received = None if received is None else int_field("request.request_received_ms", received)
    total = req.get("total_time_ms")
    if total is not None:
        total_ms = round(max(finite_field("request.total_time_ms", total, non_negative=False), 0.0))
    else:
        total_ms = max(event - (received if received is not None else event), 0)
    end = received + total_ms if received is not None else event
    start = received if received is not None else max(event - total_ms, 0)
    ctx = rec.get("agent_context")
    trajectory, parent = rid, None
    if isinstance(ctx, dict):
        trajectory = id_field("agent_context.trajectory_id", ctx.get("trajectory_id"))
        if ctx.get("parent_trajectory_id") is not None:
            parent = id_field("agent_context.parent_trajectory_id", ctx["parent_trajectory_id"])
    return _Request(line, rid, start, end, trajectory, parent, int_field("request.output_tokens", out),
                    block, length, hashes)


def _tool(rec: dict[str, Any]) -> tuple[str, int, int] | None:
    ctx, tool = rec.get("agent_context"), rec.get("tool")
    if not isinstance(ctx, dict) or not isinstance(tool, dict) or ctx.get("trajectory_id") is None:
        return None
    end = tool.get("ended_at_unix_ms", rec.get("event_time_unix_ms"))
    if not isinstance(end, (int, float)):
        return None
    start = tool.get("started_at_unix_ms")
    if start is None and isinstance(tool.get("duration_ms"), (int, float)):
        start = end - round(max(tool["duration_ms"], 0.0))
    start = end if start is None else start
    return (str(ctx["trajectory_id"]), int(start), int(end)) if end >= start else None


def _covered(tools: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Milliseconds of ``[lo, hi]`` covered by the union of the ``tools`` spans."""
    spans = sorted((max(s, lo), min(e, hi)) for s, e in tools if min(e, hi) > max(s, lo))
    total, cur = 0, None
    for s, e in spans:
        if cur is not None and s <= cur[1]:
            cur = (cur[0], max(cur[1], e))
            continue
        if cur is not None:
            total += cur[1] - cur[0]
        cur = (s, e)
    return total + (cur[1] - cur[0] if cur is not None else 0)


def lower(requests: list[_Request], tools: list[tuple[str, int, int]], path: str,
          trace_block_size: int) -> list[Row]:
    """The agentic rows of the converter (see the module docstring)."""
    if not requests:
        raise TraceError("no request_end records with replay fields found", file=path)
    for r in requests:
        if r.block_size != requests[0].block_size:
            raise TraceError(f"field 'request.replay.trace_block_size': {r.block_size} differs from "
                             f"{requests[0].block_size} (line {requests[0].line}); mixed sizes are "
                             "not supported", file=path, line=r.line)
    if requests[0].block_size != trace_block_size:
        raise TraceError(f"field 'request.replay.trace_block_size': the trace's block size is "
                         f"{requests[0].block_size}; set workload.trace.trace_block_size to it "
                         f"(got {trace_block_size})", file=path, line=requests[0].line)
    reqs = sorted(requests, key=lambda r: (r.start, r.end, r.request_id))
    seen: dict[str, _Request] = {}
    for r in reqs:
        if r.request_id in seen:
            raise TraceError(f"field 'request.request_id': {r.request_id!r} is used twice "
                             f"(first on line {seen[r.request_id].line})", file=path, line=r.line)
        seen[r.request_id] = r
    by_traj: dict[str, list[int]] = {}
    parent_of: dict[str, str] = {}
    for i, r in enumerate(reqs):
        by_traj.setdefault(r.trajectory, []).append(i)
        if r.parent is not None:
            known = parent_of.setdefault(r.trajectory, r.parent)
            if known != r.parent:
                raise TraceError(f"field 'agent_context.parent_trajectory_id': trajectory "
                                 f"{r.trajectory!r} has parents {known!r} and {r.parent!r}",
                                 file=path, line=r.line)
    wait: list[list[str]] = [[] for _ in reqs]
    branches: list[list[str]] = [[] for _ in reqs]

    def add(lst: list[str], v: str) -> None:
        if v not in lst:
            lst.append(v)

    for idx in by_traj.values():
        for pos in range(1, len(idx)):
            add(wait[idx[pos]], reqs[idx[pos - 1]].request_id)
    for child, parent in parent_of.items():
        kids, mums = by_traj[child], by_traj.get(parent)
        if not mums:
            continue
        first = kids[0]
        last = max(kids, key=lambda i: (reqs[i].end, reqs[i].start, reqs[i].request_id))
        before = [i for i in mums if reqs[i].end <= reqs[first].start]
        if before:
            spawn = max(before, key=lambda i: reqs[i].end)
            add(wait[first], reqs[spawn].request_id)
            add(branches[spawn], reqs[first].request_id)
        after = [i for i in mums if reqs[i].start >= reqs[last].end]
        if after:
            join = min(after, key=lambda i: reqs[i].start)
            add(wait[join], reqs[last].request_id)
    spans: dict[str, list[tuple[int, int]]] = {}
    for traj, s, e in tools:
        spans.setdefault(traj, []).append((s, e))
    base = min(r.start for r in reqs)
    dense: dict[int, int] = {}
    rows = []
    for i, r in enumerate(reqs):
        row = Row(r.line, r.request_id, r.output_tokens,
                  [dense.setdefault(h, len(dense)) for h in r.hashes], r.trajectory, r.input_length,
                  float(r.start - base))
        row.wait_for, row.branches = wait[i], branches[i]
        row.prefix_reset = by_traj[r.trajectory][0] == i
        if wait[i]:
            dep_end = max(seen[d].end for d in wait[i])
            gap = max(r.start - dep_end, 0)
            tool = min(_covered(spans.get(r.trajectory, []), dep_end, r.start), gap) \
                if r.start > dep_end else 0
            row.tool_wait_ms = float(tool)
            row.delay_ms = float(gap - tool)
        rows.append(row)
    return rows


class DynamoAgentTrace:
    """Reader registered as the ``dynamo_agent_trace`` trace format."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int = 512,
             options: dict[str, Any] | None = None) -> Workload:
        requests: list[_Request] = []
        tools: list[tuple[str, int, int]] = []
        for lineno, value in json_lines(path):
            try:
                rec = value.get("event", value) if isinstance(value, dict) else value
                if not isinstance(rec, dict):
                    continue
                kind = rec.get("event_type")
                if kind == "request_end":
                    requests.append(_request(rec, lineno))
                elif kind in ("tool_end", "tool_error"):
                    tool = _tool(rec)
                    if tool is not None:
                        tools.append(tool)
            except ValueError as exc:
                raise TraceError(str(exc), file=path, line=lineno) from None
        rows = lower(requests, tools, path, trace_block_size)
        # the rows in start order are the request ids: dependencies always point backwards
        return build_workload(rows, path, trace_block_size)


__all__ = ["DynamoAgentTrace", "lower"]
