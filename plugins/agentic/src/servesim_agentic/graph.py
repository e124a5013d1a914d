"""Agentic rows to a servesim workload: every row is a request of its own that waits for the
requests its ``wait_for`` names (servesim.replay.release).

As the reference's agentic replay does (Dynamo 1.6.1, ``loadgen`` ``AgenticMooncake``: "each
row dispatches after ``wait_for`` completions plus its authored delay/tool wait"), a row with
no ``wait_for`` is a root, ready at its ``timestamp`` (rebased so the earliest root is at 0; a
root without one is ready at 0); any other row is released ``delay + tool_wait_ms`` after the
last request it waits for finishes; its own timestamp is kept as its authored start (a
snapshot's cut reads it, servesim.workload.snapshot) but never releases it. ``session_id`` only
labels the row (the per-request output shows it); ``branches`` (the rows it spawns) must name
rows of the trace; ``prefix_reset`` is read and checked but changes nothing, since every row's
``hash_ids`` give its whole prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from attrs import define, field
from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload
from servesim.workload.textlines import json_values, read_text_lines

MAX_OUTPUT_LENGTH = 1 << 24


@define
class Row:
    """One request of an agentic trace, as read (``line``: where, for errors)."""

    line: int
    request_id: str
    output_length: int
    hash_ids: list[int]
    session_id: str | None = None
    input_length: int | None = None
    timestamp: float | None = None
    delay_ms: float = 0.0
    tool_wait_ms: float = 0.0
    wait_for: list[str] = field(factory=list)
    branches: list[str] = field(factory=list)
    prefix_reset: bool = False
    priority: int = 0
    slo_class: str | None = None


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def int_field(key: str, v: Any, minimum: int = 0) -> int:
    if not is_int(v) or v < minimum:
        raise ValueError(f"field {key!r}: expected an integer >= {minimum}, got {v!r}")
    return int(v)


def one_of(obj: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    """The one of ``keys`` (a field's names) that ``obj`` sets, with its value, or None; a
    ValueError when it sets more than one."""
    found = [(k, obj[k]) for k in keys if obj.get(k) is not None]
    if len(found) > 1:
        raise ValueError(f"both {found[0][0]!r} and {found[1][0]!r} are given; use one")
    return found[0] if found else None


def finite_field(key: str, v: Any, non_negative: bool = True) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) \
            or (non_negative and v < 0):
        raise ValueError(f"field {key!r}: expected a finite number{' >= 0' if non_negative else ''}, "
                         f"got {v!r}")
    return float(v)


def id_field(key: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)) or v == "":
        raise ValueError(f"field {key!r}: expected a non-empty string or an integer, got {v!r}")
    return str(v)


def id_list(key: str, v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"field {key!r}: expected a list of request ids, got {v!r}")
    return [id_field(key, x) for x in v]


def build_workload(rows: list[Row], path: str, trace_block_size: int) -> Workload:
    """The workload of ``rows`` (file order gives request ids 0..n-1)."""
    index = index_ids(rows, path)
    deps: list[tuple[int, ...]] = []
    for row in rows:
        for key, names in (("wait_for", row.wait_for), ("branches", row.branches)):
            missing = [n for n in names if n not in index]
            if missing:
                raise TraceError(f"field {key!r}: no request {missing[0]!r} in the trace",
                                 file=path, line=row.line)
        mine = tuple(dict.fromkeys(index[n] for n in row.wait_for))
        if index[row.request_id] in mine:
            raise TraceError("field 'wait_for': a request cannot wait for itself",
                             file=path, line=row.line)
        deps.append(mine)
    _check_acyclic(rows, deps, path)
    roots = [r.timestamp for r, d in zip(rows, deps, strict=True) if not d and r.timestamp is not None]
    base = min(roots, default=0.0)
    sessions = []
    for rid, (row, d) in enumerate(zip(rows, deps, strict=True)):
        full = len(row.hash_ids) * trace_block_size
        length = full if row.input_length is None else min(row.input_length, full)
        prompt = RepeatedBlockTokens(row.hash_ids, trace_block_size, length)
        turn = Turn(rid, prompt, row.output_length, row.delay_ms + row.tool_wait_ms if d else 0.0,
                    row.line, row.priority)
        turn.slo_class = row.slo_class
        turn.wait_for = d
        # a dependent's timestamp is its authored start (a snapshot's cut reads it), never its
        # release (servesim.replay.release)
        start = row.timestamp if d else (row.timestamp if row.timestamp is not None else base)
        sessions.append(Session(row.session_id or row.request_id, start, [turn]))
    return make_workload(sessions, path)


def json_lines(path: str) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` for every non-blank line of the trace ``path``, decoded as JSON; a
    line that is not JSON, or nests too deeply to read, is a trace error naming file and line
    (an unreadable file or bytes that are not UTF-8 are reported before any line)."""
    return json_values(read_text_lines(path, "trace"), path)


def index_ids(rows: Sequence[Any], path: str) -> dict[str, int]:
    """Each row's ``request_id`` -> its position; an id used twice is a trace error."""
    index: dict[str, int] = {}
    for rid, row in enumerate(rows):
        if row.request_id in index:
            raise TraceError(f"field 'request_id': {row.request_id!r} is used twice "
                             f"(first on line {rows[index[row.request_id]].line})",
                             file=path, line=row.line)
        index[row.request_id] = rid
    return index


def _check_acyclic(rows: list[Row], deps: list[tuple[int, ...]], path: str) -> None:
    check_acyclic(deps, [r.line for r in rows], path, "wait_for")


def check_acyclic(deps: Sequence[Sequence[int]], lines: Sequence[int], path: str,
                  field: str) -> None:
    """Kahn's algorithm: every request (``deps[rid]``: the requests it waits for) must become
    releasable; the first one that cannot is on (or behind) a cycle, reported at its line in
    ``field``."""
    n = len(deps)
    left = [len(d) for d in deps]
    after: list[list[int]] = [[] for _ in range(n)]
    for rid, d in enumerate(deps):
        for x in d:
            after[x].append(rid)
    ready = [rid for rid in range(n) if not left[rid]]
    seen = 0
    while ready:
        rid = ready.pop()
        seen += 1
        for y in after[rid]:
            left[y] -= 1
            if not left[y]:
                ready.append(y)
    if seen < n:
        stuck = min(rid for rid in range(n) if left[rid])
        raise TraceError(f"field '{field}': the dependencies form a cycle through this request",
                         file=path, line=lines[stuck])


__all__ = ["MAX_OUTPUT_LENGTH", "Row", "build_workload", "finite_field", "id_field", "id_list",
           "int_field", "is_int", "one_of"]
