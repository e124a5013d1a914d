"""The workload model every trace reader and generator produces.

A workload is a list of *sessions*; each session is one or more *turns* (requests). The first
turn of a session arrives at its timestamp; a later turn is released only after the previous
turn of its session finishes, plus that turn's delay (dynamo-mocker.md §9.1-§9.2). Requests
carry lazy prompts (:class:`servesim.tokens.TokenSeq`) so a 100k-request trace never
materialises its tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain
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

    sessions: tuple[Session, ...]
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


def make_workload(sessions: Sequence[Session], source: str,
                  lora_names: dict[str, list[int]] | None = None,
                  client_concurrency: int | None = None, client_warmups: int = 0) -> Workload:
    """A workload of the non-empty ``sessions``, in the given (file) order."""
    return Workload(tuple(s for s in sessions if s.turns), source, lora_names or {}, client_concurrency,
                    client_warmups)


def mark_unique_prompts(workload: Workload) -> int:
    """Set ``unique_from`` on every prompt that has a trace block no other trace block of the
    workload shares (:class:`servesim.tokens.RepeatedBlockTokens`); returns how many were
    marked. Blocks from there on can never be shared between requests, so a rank whose block
    hashes nobody else reads may give them placeholders instead of computing them
    (``TokenSeq.block_hashes_elided``). The argument needs every prompt of the replay in
    view, each made of repeated trace-block tokens of one ``trace_block_size``, and generated
    tokens that are pseudo tokens (the replay never fixes output token ids); anything else
    marks nothing.
    """
    prompts = [t.prompt for s in workload.sessions for t in s.turns]
    if not prompts or any(type(p) is not RepeatedBlockTokens for p in prompts):
        return 0
    tb = prompts[0].trace_block_size  # type: ignore[attr-defined]
    if tb < 2 or any(p.trace_block_size != tb for p in prompts):  # type: ignore[attr-defined]
        return 0
    # Token values, not ids: ids equal in their low 32 bits make the same tokens. The ids are
    # counted straight from the prompts' arrays (no list of every id of the trace).
    ids = [p.hash_ids for p in prompts if len(p.hash_ids)]  # type: ignore[attr-defined]
    if not ids:
        return 0
    wide = max(map(max, ids)) > _MASK32 or min(map(min, ids)) < 0
    every = chain.from_iterable(ids)
    counts = Counter((h & _MASK32 for h in every) if wide else every)
    marked = 0
    for p in prompts:
        n = len(p)
        for i, h in enumerate(p.hash_ids):  # type: ignore[attr-defined]
            start = i * tb
            if start + 2 > n:
                break
            if counts[h & _MASK32 if wide else h] == 1:
                p.unique_from = start  # type: ignore[attr-defined]
                marked += 1
                break
    return marked


class TraceFormat(Protocol):
    """What a ``trace_format`` plugin registers: a class with ``read``.

    ``read(path, trace_block_size=..., options=...)`` returns a :class:`Workload` and raises
    :class:`servesim.errors.TraceError` naming the file and line of any malformed record.
    """

    @classmethod
    def read(
        cls, path: str, *, trace_block_size: int, options: dict[str, Any] | None = None
    ) -> Workload: ...
