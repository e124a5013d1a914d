"""The ``agentic_mooncake`` trace format: Mooncake rows with request-level dependencies, as
Dynamo 1.6.1's replay reads them (``lib/mocker/src/loadgen``, ``AgenticMooncakeRow``).

One JSON object per line (blank lines skipped; a first line holding ``schema`` and no
``request_id`` is a header and is skipped). Fields: ``request_id`` (required, a string or an
integer, unique), ``session_id`` (a label), ``hash_ids`` (required, non-empty, integers >= 0),
``output_length`` / ``output_tokens`` (required), ``input_length`` / ``input_tokens``
(clamped to ``len(hash_ids) * trace_block_size``), ``timestamp`` / ``created_time`` (ms; a
root's release), ``delay`` / ``delay_ms`` and ``tool_wait_ms`` (ms >= 0, summed: the wait
after the last dependency), ``wait_for`` and ``branches`` (lists of request ids),
``prefix_reset`` (boolean), ``priority`` (integer), ``policy_class`` / ``class`` (the SLO
class, ``workload.classes``). Unknown keys are ignored. How rows are released:
:mod:`servesim_agentic.graph`.

A file whose header names the schema ``dynamo.agentic_mooncake`` (version 2) holds the
reference's own rows instead (typed dependencies, ``not_before_ms``):
:mod:`servesim_agentic.agentic_v2`; its header's ``block_size`` is the trace block size.
"""

from __future__ import annotations

from typing import Any

from servesim.errors import TraceError
from servesim.workload.model import Workload

from servesim_agentic.agentic_v2 import (
    SCHEMA,
    V2Row,
    build_v2_workload,
    is_header,
    parse_v2_row,
    read_header,
)
from servesim_agentic.graph import (
    MAX_OUTPUT_LENGTH,
    Row,
    build_workload,
    finite_field,
    id_field,
    id_list,
    int_field,
    is_int,
    json_lines,
    one_of,
)

_ALIASES = {
    "timestamp": ("timestamp", "created_time"),
    "input_length": ("input_length", "input_tokens"),
    "output_length": ("output_length", "output_tokens"),
    "delay": ("delay", "delay_ms"),
    "class": ("policy_class", "class"),
}


def _pick(obj: dict[str, Any], name: str) -> tuple[str, Any] | None:
    return one_of(obj, _ALIASES.get(name, (name,)))


def parse_row(obj: Any, line: int) -> Row:
    """One row; a ValueError names the field at fault."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if obj.get("request_id") is None:
        raise ValueError("missing required field 'request_id'")
    rid = id_field("request_id", obj["request_id"])
    hid = obj.get("hash_ids")
    if not isinstance(hid, list) or not hid:
        raise ValueError(f"field 'hash_ids': expected a non-empty list of integers >= 0, got {hid!r}")
    hash_ids = [int_field("hash_ids", h) for h in hid]
    out = _pick(obj, "output_length")
    if out is None:
        raise ValueError("missing required field 'output_length'")
    output_length = int_field(*out)
    if output_length > MAX_OUTPUT_LENGTH:
        raise ValueError(f"field {out[0]!r}: must be at most {MAX_OUTPUT_LENGTH}, got {output_length}")
    row = Row(line, rid, output_length, hash_ids)
    inp = _pick(obj, "input_length")
    if inp is not None:
        row.input_length = int_field(*inp, minimum=1)
    ts = _pick(obj, "timestamp")
    if ts is not None:
        row.timestamp = finite_field(*ts, non_negative=False)
    delay = _pick(obj, "delay")
    if delay is not None:
        row.delay_ms = finite_field(*delay)
    if obj.get("tool_wait_ms") is not None:
        row.tool_wait_ms = finite_field("tool_wait_ms", obj["tool_wait_ms"])
    sid = obj.get("session_id")
    if sid is not None:
        row.session_id = id_field("session_id", sid)
    row.wait_for = id_list("wait_for", obj.get("wait_for"))
    row.branches = id_list("branches", obj.get("branches"))
    reset = obj.get("prefix_reset")
    if reset is not None and not isinstance(reset, bool):
        raise ValueError(f"field 'prefix_reset': expected true or false, got {reset!r}")
    row.prefix_reset = bool(reset)
    pri = obj.get("priority")
    if pri is not None and not is_int(pri):
        raise ValueError(f"field 'priority': expected an integer, got {pri!r}")
    row.priority = int(pri or 0)
    cls = _pick(obj, "class")
    if cls is not None:
        if not isinstance(cls[1], str) or not cls[1]:
            raise ValueError(f"field {cls[0]!r}: expected a non-empty class name, got {cls[1]!r}")
        row.slo_class = cls[1]
    return row


class AgenticMooncakeTrace:
    """Reader registered as the ``agentic_mooncake`` trace format."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int = 512,
             options: dict[str, Any] | None = None) -> Workload:
        rows: list[Row] = []
        v2: list[V2Row] = []
        v2_block = 0
        for lineno, obj in json_lines(path):
            try:
                if not rows and not v2 and not v2_block and is_header(obj):
                    if obj.get("schema") == SCHEMA:  # a v2 file (servesim_agentic.agentic_v2)
                        v2_block = read_header(obj)
                    continue  # a header line
                if v2_block:
                    v2.append(parse_v2_row(obj, lineno))
                else:
                    rows.append(parse_row(obj, lineno))
            except ValueError as exc:
                raise TraceError(str(exc), file=path, line=lineno) from None
        if v2_block:
            return build_v2_workload(v2, path, v2_block)
        return build_workload(rows, path, trace_block_size)


__all__ = ["AgenticMooncakeTrace", "parse_row"]
