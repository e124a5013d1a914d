"""Agentic Mooncake v2 rows, the graph Dynamo 1.6.1's replay reads for ``agentic_mooncake``
and lowers ``weka`` corpora into (``aisimulate_core`` ``replay/loadgen``: ``AgenticMooncakeRow``,
``AgenticDependency``; schema ``dynamo.agentic_mooncake`` version 2).

A v2 file starts with a header line ``{"schema": "dynamo.agentic_mooncake", "version": 2,
"block_size": B, "hash_id_scope": "local", "source": {"format": ..., "digest": ...}}``; ``B``
is the tokens per ``hash_ids`` entry. Each following line is a row: ``request_id``,
``play_id``, ``session_id`` and ``model`` (required strings), ``not_before_ms`` (required,
finite, >= 0), ``hash_ids`` (required, non-empty), ``output_length`` / ``output_tokens``
(required), ``input_length`` / ``input_tokens`` (default ``len(hash_ids) * B``, at most
that), ``priority`` (integer), ``policy_class`` (the SLO class) and ``dependencies``: a list of
``{"request_id", "trigger": "dispatch"|"completion", "delay_ms", "relation":
"sequence"|"spawn"|"join"|"replay_barrier"}`` naming a request of the same play (only
``spawn`` may use ``dispatch``). Release: servesim.replay.edge_release (the
relation labels an edge and changes nothing).
"""

from __future__ import annotations

from typing import Any

from attrs import define, field
from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import EdgeTurn, Session, Workload, make_workload

from servesim_agentic.graph import (
    MAX_OUTPUT_LENGTH,
    check_acyclic,
    finite_field,
    index_ids,
    int_field,
    is_int,
    one_of,
)

SCHEMA = "dynamo.agentic_mooncake"
VERSION = 2
TRIGGERS = {"dispatch": True, "completion": False}
RELATIONS = ("sequence", "spawn", "join", "replay_barrier")


@define
class V2Row:
    """One v2 row as read (``line``: where, for errors)."""

    line: int
    request_id: str
    session_id: str
    play_id: str
    hash_ids: list[int]
    output_length: int
    not_before_ms: float
    input_length: int | None = None
    priority: int = 0
    policy_class: str | None = None
    deps: list[tuple[str, bool, float]] = field(factory=list)


def is_header(obj: Any) -> bool:
    return isinstance(obj, dict) and "schema" in obj and "request_id" not in obj


def read_header(obj: dict[str, Any]) -> int:
    """The header's ``block_size``; a ValueError names the field at fault."""
    if obj.get("schema") != SCHEMA:
        raise ValueError(f"field 'schema': expected {SCHEMA!r}, got {obj.get('schema')!r}")
    if obj.get("version") != VERSION:
        raise ValueError(f"field 'version': expected {VERSION}, got {obj.get('version')!r}")
    if obj.get("hash_id_scope") != "local":
        raise ValueError(f"field 'hash_id_scope': expected 'local', got {obj.get('hash_id_scope')!r}")
    return int_field("block_size", obj.get("block_size"), minimum=1)


def _text(obj: dict[str, Any], key: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"field {key!r}: expected a non-empty string, got {v!r}")
    return v


def parse_v2_row(obj: Any, line: int) -> V2Row:
    """One v2 row; a ValueError names the field at fault."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    rid = _text(obj, "request_id")
    play = _text(obj, "play_id")
    _text(obj, "model")
    session = _text(obj, "session_id")
    if "not_before_ms" not in obj:
        raise ValueError("missing required field 'not_before_ms'")
    not_before = finite_field("not_before_ms", obj["not_before_ms"])
    hid = obj.get("hash_ids")
    if not isinstance(hid, list) or not hid:
        raise ValueError(f"field 'hash_ids': expected a non-empty list of integers >= 0, got {hid!r}")
    hashes = [int_field("hash_ids", h) for h in hid]
    out = one_of(obj, ("output_length", "output_tokens"))
    if out is None:
        raise ValueError("missing required field 'output_length'")
    output_length = int_field(*out)
    if output_length > MAX_OUTPUT_LENGTH:
        raise ValueError(f"field {out[0]!r}: must be at most {MAX_OUTPUT_LENGTH}, got {output_length}")
    row = V2Row(line, rid, session, play, hashes, output_length, not_before)
    inp = one_of(obj, ("input_length", "input_tokens"))
    if inp is not None:
        row.input_length = int_field(*inp, minimum=1)
    pri = obj.get("priority")
    if pri is not None and not is_int(pri):
        raise ValueError(f"field 'priority': expected an integer, got {pri!r}")
    row.priority = int(pri or 0)
    cls = obj.get("policy_class")
    if cls is not None:
        if not isinstance(cls, str) or not cls:
            raise ValueError(f"field 'policy_class': expected a non-empty class name, got {cls!r}")
        row.policy_class = cls
    deps = obj.get("dependencies", [])
    if not isinstance(deps, list):
        raise ValueError(f"field 'dependencies': expected a list, got {deps!r}")
    for i, d in enumerate(deps):
        row.deps.append(_dependency(d, f"dependencies[{i}]"))
    return row


def _dependency(d: Any, where: str) -> tuple[str, bool, float]:
    if not isinstance(d, dict):
        raise ValueError(f"field {where!r}: expected an object, got {d!r}")
    src = d.get("request_id")
    if not isinstance(src, str) or not src:
        raise ValueError(f"field '{where}.request_id': expected a non-empty string, got {src!r}")
    trigger = d.get("trigger")
    if trigger not in TRIGGERS:
        raise ValueError(f"field '{where}.trigger': expected 'dispatch' or 'completion', "
                         f"got {trigger!r}")
    if d.get("relation") not in RELATIONS:
        raise ValueError(f"field '{where}.relation': expected one of {', '.join(RELATIONS)}, "
                         f"got {d.get('relation')!r}")
    if TRIGGERS[trigger] and d["relation"] != "spawn":
        raise ValueError(f"field '{where}.trigger': only a 'spawn' dependency may use the "
                         f"'dispatch' trigger, not {d['relation']!r}")
    delay = finite_field(f"{where}.delay_ms", d.get("delay_ms"))
    return src, TRIGGERS[trigger], delay


def build_v2_workload(rows: list[V2Row], path: str, block_size: int,
                      play_order: dict[str, int] | None = None) -> Workload:
    """The workload of ``rows``: one single-turn session per row, its dependencies as
    ``EdgeTurn.edges`` (servesim.replay.edge_release). Request ids 0..n-1 follow the rows sorted by
    ``request_id``, the order the reference's graph builder gives its nodes (it breaks ties
    between requests ready at the same time by it). Sessions are in play order (the order
    ``workload.lanes`` starts plays in): ``play_order`` ranks the plays (a weka corpus: its
    plays' source order), else a play ranks by its first request in node order."""
    rows = sorted(rows, key=lambda r: r.request_id)
    if play_order is None:
        play_order = {}
        for r in rows:
            play_order.setdefault(r.play_id, len(play_order))
    index = index_ids(rows, path)
    sessions = []
    for rid, row in enumerate(rows):
        edges = []
        for src, on_dispatch, delay in row.deps:
            if src not in index:
                raise TraceError(f"field 'dependencies': no request {src!r} in the trace",
                                 file=path, line=row.line)
            if rows[index[src]].play_id != row.play_id:
                raise TraceError(f"field 'dependencies': request {src!r} is in play "
                                 f"{rows[index[src]].play_id!r}, not this row's "
                                 f"{row.play_id!r}", file=path, line=row.line)
            if index[src] == rid:
                raise TraceError("field 'dependencies': a request cannot depend on itself",
                                 file=path, line=row.line)
            edges.append((index[src], on_dispatch, delay))
        full = len(row.hash_ids) * block_size
        if row.input_length is not None and row.input_length > full:
            raise TraceError(f"field 'input_length': {row.input_length} is more than the "
                             f"{len(row.hash_ids)} hash_ids of {block_size} tokens hold",
                             file=path, line=row.line)
        length = full if row.input_length is None else row.input_length
        prompt = RepeatedBlockTokens(row.hash_ids, block_size, length)
        turn = EdgeTurn(rid, prompt, row.output_length, 0.0, row.line, row.priority)
        turn.slo_class = row.policy_class
        turn.wait_for = tuple(dict.fromkeys(e[0] for e in edges))
        turn.edges = tuple(edges)
        turn.not_before_ms = row.not_before_ms
        sessions.append(Session(row.session_id, row.not_before_ms, [turn]))
    _check_acyclic(rows, sessions, path)
    order = sorted(range(len(rows)), key=lambda rid: (play_order[rows[rid].play_id], rid))
    return make_workload([sessions[rid] for rid in order], path)


def _check_acyclic(rows: list[V2Row], sessions: list[Session], path: str) -> None:
    check_acyclic([s.turns[0].wait_for for s in sessions], [r.line for r in rows], path,
                  "dependencies")


__all__ = ["SCHEMA", "V2Row", "build_v2_workload", "is_header", "parse_v2_row", "read_header"]
