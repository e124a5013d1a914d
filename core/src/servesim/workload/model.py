"""The workload model every trace reader and generator produces.

A workload is a list of *sessions*; each session is one or more *turns* (requests). The first
turn of a session arrives at its timestamp; a later turn is released only after the previous
turn of its session finishes, plus that turn's delay (dynamo-mocker.md §9.1-§9.2). Requests
carry lazy prompts (:class:`servesim.tokens.TokenSeq`) so a 100k-request trace never
materialises its tokens. A replay reads a workload through :meth:`Workload.turn_source` and
the per-request and per-session columns beside it, so a trace read as a stream
(servesim.workload.streamed) need not hold its requests.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from attrs import define, field, frozen

from servesim.tokens import RepeatedBlockTokens, TokenSeq

_MASK32 = 0xFFFFFFFF


@define(slots=True)
class Turn:
    """One request of a session. ``delay_ms`` is 0 for a first turn. ``priority`` and ``lora``
    are the request's (:class:`servesim.contract.Request`); ``lora`` 0 is the base model.
    ``slo_class``: the SLO class a trace names (``workload.classes``), or None. ``wait_for``:
    request ids this turn also waits for besides its session's previous turn (an agentic
    trace's dependency graph, servesim.replay.release); it is released ``delay_ms`` after the
    last of them finishes; for a first turn with them, its session's ``start_ms`` (if any) is
    its authored start, never its release (:class:`EdgeTurn`: typed dependencies instead)."""

    request_id: int
    prompt: TokenSeq
    output_length: int
    delay_ms: float = 0.0
    line: int | None = None
    priority: int = 0
    lora: int = 0
    slo_class: str | None = None
    wait_for: tuple[int, ...] = ()

    @property
    def input_length(self) -> int:
        return len(self.prompt)


@define(slots=True)
class EdgeTurn(Turn):
    """A turn of the reference's agentic graph (Dynamo 1.6.1's agentic replay): ``edges``, its
    typed dependencies, each ``(request_id, on_dispatch, delay_ms)``, and ``not_before_ms``. It
    is released at the latest of ``not_before_ms`` and every edge's source dispatch
    (``on_dispatch``) or finish plus that edge's delay (servesim.replay.edge_release);
    ``wait_for`` names the same requests (plays and graph checks read it). A subclass so that
    ordinary turns carry nothing more."""

    edges: tuple[tuple[int, bool, float], ...] = ()
    not_before_ms: float | None = None


@define(slots=True)
class Session:
    """Turns in order; ``start_ms`` is the first turn's raw (not yet rebased) timestamp, or
    None when the trace gives none (allowed only in concurrency mode)."""

    session_id: str
    start_ms: float | None
    turns: list[Turn] = field(factory=list)


@frozen
class Workload:
    """Sessions in file order (the order concurrency mode starts them in; timestamp mode
    orders arrivals by time, then by this order). Request ids are dense ``0..n-1``.
    ``lora_names``: the LoRA adapters the trace names (not by id), each with the request ids of
    its turns in file order, for :func:`servesim.replay.adapter_names.resolve_adapter_names`.
    ``client_concurrency``: how many requests the trace's client kept in flight (a benchmark
    client's ``max_concurrency``), or None; the replay must cap its sessions at the same number
    (:func:`servesim.replay.runner.load_workload` checks). ``client_warmups``: how many
    warm-up sessions lead the trace, which its client waited for before the rest (0: none);
    the replay must run them as ``workload.warmup: {requests: N, wait: true}`` (checked there
    too)."""

    sessions: Sequence[Session]
    source: str = "<workload>"
    lora_names: dict[str, list[int]] = field(factory=dict)
    client_concurrency: int | None = None
    client_warmups: int = 0

    @property
    def num_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def turns(self) -> list[Turn]:
        """Every turn, indexed by request id."""
        out: list[Turn | None] = [None] * self.num_requests
        for s in self.sessions:
            for t in s.turns:
                out[t.request_id] = t
        return out  # type: ignore[return-value]

    def each_turn(self) -> Iterator[Turn]:
        """Every turn, one at a time, in session order (a streamed trace: in file order)."""
        for s in self.sessions:
            yield from s.turns

    # What a replay reads. A streamed trace (servesim.workload.streamed) answers these from
    # its columns and reads its requests as the replay goes; these are the held trace's.

    def turn_source(self) -> TurnSource:
        """The requests by id, as the replay reads them (``release(rid)`` once one finished)."""
        return TurnList(self.turns())

    def request_columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        """Per request id: its prompt's tokens, its output's tokens and its adapter id."""
        turns = self.turns()
        return [t.input_length for t in turns], [t.output_length for t in turns], [t.lora for t in turns]

    def session_columns(self) -> tuple[Sequence[str], Sequence[int], Sequence[int]]:
        """Per request id: its session id, its session's index, and its next turn's id (or -1)."""
        n = self.num_requests
        session_of = [""] * n
        session_index = [0] * n
        next_turn = [-1] * n
        for i, s in enumerate(self.sessions):
            for a, b in zip(s.turns, s.turns[1:], strict=False):
                next_turn[a.request_id] = b.request_id
            for t in s.turns:
                session_of[t.request_id] = s.session_id
                session_index[t.request_id] = i
        return session_of, session_index, next_turn

    def first_turn_columns(self) -> tuple[Sequence[float], Sequence[int]]:
        """Per session, in order: its start (nan: the trace gives none) and first turn's id."""
        return (array("d", [math.nan if s.start_ms is None else s.start_ms for s in self.sessions]),
                [s.turns[0].request_id for s in self.sessions])

    def line_of(self, rid: int) -> int | None:
        """The trace line of request ``rid`` (None: generated)."""
        return self.turns()[rid].line

    def has_dependencies(self) -> bool:
        """Whether a turn waits for requests of other sessions (servesim.replay.release)."""
        return any(t.wait_for for s in self.sessions for t in s.turns)

    def set_adapter(self, name: str, rids: Sequence[int], lora: int) -> None:
        """Requests ``rids``, which name adapter ``name``, run on adapter id ``lora``."""
        turns = self.turns()
        for rid in rids:
            turns[rid].lora = lora

    def named_classes(self) -> dict[int, str]:
        """The SLO class a trace names for a request (``Turn.slo_class``), by request id."""
        return {t.request_id: t.slo_class for t in self.each_turn() if t.slo_class is not None}

    def set_priorities(self, priorities: Sequence[int | None]) -> None:
        """Request ``rid`` gets priority ``priorities[rid]`` (None: it keeps its own)."""
        for t in self.each_turn():
            p = priorities[t.request_id]
            if p is not None:
                t.priority = p

    def set_unique_from(self, marks: Sequence[int]) -> None:
        """Each request's ``unique_from`` (``marks[rid]``, -1: none; mark_unique_prompts)."""
        for t in self.each_turn():
            if marks[t.request_id] >= 0:
                t.prompt.unique_from = marks[t.request_id]  # type: ignore[attr-defined]

    def held(self) -> Workload:
        """The workload with every request an object at once (this one)."""
        return self


class TurnSource(Protocol):
    """A replay's requests by id (:meth:`Workload.turn_source`)."""

    def __getitem__(self, rid: int) -> Turn: ...

    def __len__(self) -> int: ...

    def release(self, rid: int) -> None:
        """Request ``rid`` finished: the replay reads it no more."""


class TurnList(list[Turn]):
    """A held trace's requests by id (:meth:`Workload.turn_source`): nothing to release."""

    def release(self, rid: int) -> None:
        """Request ``rid`` finished (a streamed trace drops it here)."""


def make_workload(sessions: Sequence[Session], source: str,
                  lora_names: dict[str, list[int]] | None = None,
                  client_concurrency: int | None = None, client_warmups: int = 0) -> Workload:
    """A workload of the non-empty ``sessions``, in the given (file) order."""
    return Workload(tuple(s for s in sessions if s.turns), source, lora_names or {}, client_concurrency,
                    client_warmups)


MARKS_IN_ARRAYS = 20_000
"""Trace block ids above which :func:`mark_unique_prompts` counts them in numpy (one array of
counts) instead of a map of every id; a short replay never imports numpy for it. Both ways give
the same marks (tests/replay/test_streamed_trace.py)."""


def mark_unique_prompts(workload: Workload) -> int:
    """Set ``unique_from`` on every prompt that has a trace block no other trace block of the
    workload shares (:class:`servesim.tokens.RepeatedBlockTokens`); returns how many were
    marked. Blocks from there on can never be shared between requests, so a rank whose block
    hashes nobody else reads may give them placeholders instead of computing them
    (``TokenSeq.block_hashes_elided``). The argument needs every prompt of the replay in
    view, each made of repeated trace-block tokens of one ``trace_block_size``, and generated
    tokens that are pseudo tokens (the replay never fixes output token ids); anything else
    marks nothing. A streamed trace is read once for it, its ids kept as one array of 64-bit
    integers while they are counted.
    """
    ids = array("q")
    bounds = array("q", [0])  # the k-th prompt's ids are ids[bounds[k]:bounds[k + 1]]
    lengths = array("q")
    rids = array("q")
    tb = 0
    wide = False  # an id past 64 signed bits (a prompt then keeps them in a tuple)
    for turn in workload.each_turn():
        p = turn.prompt
        if type(p) is not RepeatedBlockTokens or (tb and p.trace_block_size != tb):
            return 0
        tb = p.trace_block_size
        if type(p.hash_ids) is array:
            ids.extend(p.hash_ids)
        else:
            wide = True
            ids.extend([h & _MASK32 for h in p.hash_ids])
        bounds.append(len(ids))
        lengths.append(len(p))
        rids.append(turn.request_id)
    if tb < 2 or not len(ids):
        return 0
    # Token values, not ids: ids equal in their low 32 bits make the same tokens.
    wide = wide or max(ids) > _MASK32 or min(ids) < 0
    marks = (_marks_in_arrays if len(ids) > MARKS_IN_ARRAYS else _marks)(ids, bounds, lengths, tb, wide)
    by_rid = array("q", [-1]) * workload.num_requests
    for k, mark in enumerate(marks):
        if mark >= 0:
            by_rid[rids[k]] = mark
    workload.set_unique_from(by_rid)
    return sum(1 for mark in marks if mark >= 0)


def _marks(ids: array, bounds: array, lengths: array, tb: int, wide: bool) -> list[int]:
    """Each prompt's ``unique_from`` (-1: none): the first token of its first block whose
    value no other block has, with two of its tokens in the prompt."""
    counts = Counter((h & _MASK32 for h in ids) if wide else ids)
    out = [-1] * len(lengths)
    for k, n in enumerate(lengths):
        lo = bounds[k]
        for i in range(lo, bounds[k + 1]):
            start = (i - lo) * tb
            if start + 2 > n:
                break
            if counts[ids[i] & _MASK32 if wide else ids[i]] == 1:
                out[k] = start
                break
    return out


def _marks_in_arrays(ids: array, bounds: array, lengths: array, tb: int, wide: bool) -> array:
    """:func:`_marks` in numpy, for long traces (one array of counts, no map of every id)."""
    import numpy as np

    values = np.frombuffer(ids, dtype=np.int64)
    if wide:
        values = values & _MASK32
    # An id is unique when neither sorted neighbour equals it (sorted once; no inverse index;
    # the order among equal ids does not matter).
    order = np.argsort(values)
    ordered = values[order]
    del values
    lone = np.ones(len(ordered), dtype=bool)
    same = ordered[1:] == ordered[:-1]
    lone[1:] &= ~same
    lone[:-1] &= ~same
    del ordered, same
    unique = np.empty(len(lone), dtype=bool)
    unique[order] = lone
    del order, lone
    # Each id's prompt and its place in it; a mark needs two of the block's tokens in the prompt.
    ends = np.frombuffer(bounds, dtype=np.int64)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), np.diff(ends))
    position = np.arange(len(owner), dtype=np.int64)
    position -= ends[owner]
    unique &= position * tb + 2 <= np.frombuffer(lengths, dtype=np.int64)[owner]
    hit = np.flatnonzero(unique)
    del unique
    first_hit = hit[np.unique(owner[hit], return_index=True)[1]]
    out = np.full(len(lengths), -1, dtype=np.int64)
    out[owner[first_hit]] = position[first_hit] * tb
    return array("q", out.tobytes())


class TraceFormat(Protocol):
    """What a ``trace_format`` plugin registers: a class with ``read``.

    ``read(path, trace_block_size=..., options=...)`` returns a :class:`Workload` and raises
    :class:`servesim.errors.TraceError` naming the file and line of any malformed record. A
    class may also have ``stream`` with the same arguments, returning a workload it reads as
    the replay goes (servesim.workload.streamed); the replay then calls that.
    """

    @classmethod
    def read(
        cls, path: str, *, trace_block_size: int, options: dict[str, Any] | None = None
    ) -> Workload: ...
