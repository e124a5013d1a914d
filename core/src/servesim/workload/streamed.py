"""A trace read as a stream: what a replay needs of every request up front, in columns, and
the requests themselves only while the replay needs them.

A trace format that can (``MooncakeTrace.stream``) reads its file twice. The first pass checks
every line and keeps a :class:`TraceIndex`: per session its first timestamp and first request,
per request its session, next turn, delay, line, prompt length and adapter, a few numbers each
(no prompt). The replay then reads the file again as it goes (:class:`TurnReader`): a request
becomes a :class:`~servesim.workload.model.Turn` when the replay first asks for it, and is
dropped when it finishes. Requests the reader passes on its way to the one asked for wait in
its buffer; in a trace whose first turns are in time order (as traces are written) that
buffer holds about what is in flight. So a replay's memory is what is in flight plus the
columns and the statistics, not the trace. (Prefix-cache marks read it once more in between,
servesim.workload.model.mark_unique_prompts.)

What needs every request as an object at once (a snapshot cut, a feature of a plugin that
walks ``Workload.sessions``) reads the whole trace into objects
(:meth:`StreamedTrace.sessions`), as a trace read by ``read`` holds it from the start.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from attrs import field, frozen

from servesim.errors import TraceError
from servesim.workload.model import Session, Turn, Workload


class TraceIndex:
    """The columns of a streamed trace (module docstring). Sessions are numbered in the order
    their first turns appear, requests in file order."""

    def __init__(self, session: array, line: array) -> None:
        """``session`` and ``line``: the reader's per-request columns (it appends to them)."""
        self.start = array("d")  # per session: its first turn's timestamp (nan: none)
        self.first_rid = array("q")  # per session: its first turn
        self._last_rid = array("q")  # per session: its latest turn so far
        self.session = session  # per request: its session
        self.next_turn = array("q")  # per request: its session's next turn, or -1
        self.delay = array("d")  # per request: its delay after the previous turn (ms)
        self.line = line  # per request: its line in the file
        self.input_length = array("q")  # per request: its prompt's tokens
        self.output_length = array("q")  # per request: its output's tokens
        self.lora = array("q")  # per request: its adapter id (0: the base model)
        self.session_ids: Sequence[str] = ()  # per session: its id
        self.slo_class: dict[int, str] = {}  # the requests whose line names an SLO class

    @property
    def sessions(self) -> int:
        return len(self.first_rid)

    @property
    def n(self) -> int:
        return len(self.delay)

    def add_session(self, timestamp: float | None) -> None:
        self.start.append(math.nan if timestamp is None else timestamp)
        self.first_rid.append(len(self.delay))
        self._last_rid.append(-1)

    def add_request(self, session: int, delay: float, input_length: int, output_length: int,
                    lora: int) -> None:
        """The next request (its session and line already in the shared columns)."""
        rid = len(self.delay)
        prev = self._last_rid[session]
        if prev >= 0:
            self.next_turn[prev] = rid
        self._last_rid[session] = rid
        self.next_turn.append(-1)
        self.delay.append(delay)
        self.input_length.append(input_length)
        self.output_length.append(output_length)
        self.lora.append(lora)

    def starts(self) -> list[float | None]:
        return [None if math.isnan(t) else t for t in self.start]


class StreamedTrace:
    """A trace's :class:`TraceIndex` and a way to read its requests again, in file order
    (``turns()``: a new pass each call). ``lora_ids`` is the reader's adapter-name table,
    which :meth:`set_adapter` changes for the requests read from then on."""

    def __init__(self, index: TraceIndex, turns: Callable[[], Iterator[Turn]], source: str,
                 lora_names: dict[str, list[int]], lora_ids: dict[int | str, int]) -> None:
        self.index = index
        self._turns = turns
        self.source = source
        self.lora_names = lora_names
        self.lora_ids = lora_ids
        self.unique_from: Sequence[int] | None = None  # per request (-1: none), mark_unique_prompts
        self.priority: Sequence[int | None] | None = None  # per request (None: its own), classes
        self.passes = 0  # passes over the file since the index (a plain replay makes one)

    def workload(self) -> StreamedWorkload:
        return StreamedWorkload(_Sessions(self), self.source, self.lora_names, trace=self)

    def read(self) -> Iterator[Turn]:
        """Every request, in file order, as the replay would see it."""
        self.passes += 1
        marks, priority = self.unique_from, self.priority
        count = 0
        for turn in self._turns():
            rid = turn.request_id
            if marks is not None and marks[rid] >= 0:
                turn.prompt.unique_from = marks[rid]  # type: ignore[attr-defined]
            if priority is not None and priority[rid] is not None:
                turn.priority = priority[rid]  # type: ignore[assignment]
            count += 1
            yield turn
        if count != self.index.n:
            raise TraceError(f"the trace has {count} requests now, {self.index.n} when it was first "
                             "read (it is read again as the replay goes)", file=self.source)

    def sessions(self) -> tuple[Session, ...]:
        """The whole trace as sessions of turns (one pass, every request held)."""
        index = self.index
        ids, starts = index.session_ids, index.starts()
        out = [Session(ids[i], starts[i]) for i in range(index.sessions)]
        session = index.session
        for turn in self.read():
            out[session[turn.request_id]].turns.append(turn)
        return tuple(out)

    def set_adapter(self, name: str, rids: Iterable[int], lora: int) -> None:
        self.lora_ids[name] = lora
        for rid in rids:
            self.index.lora[rid] = lora


class _Sessions(Sequence[Session]):
    """``Workload.sessions`` of a streamed trace: the whole trace read into objects each time
    it is walked (a feature that needs it so; the replay itself reads the columns)."""

    def __init__(self, trace: StreamedTrace) -> None:
        self.trace = trace

    def __len__(self) -> int:
        return self.trace.index.sessions

    def __getitem__(self, i: Any) -> Any:
        return self.trace.sessions()[i]

    def __iter__(self) -> Iterator[Session]:
        return iter(self.trace.sessions())


class TurnReader:
    """The replay's requests of a streamed trace (module docstring): ``reader[rid]`` reads up
    to request ``rid`` if it has not yet, keeping those it passes; :meth:`release` drops a
    finished one. A request asked for again after its release is read again from the file's
    start (``rereads`` counts them; a replay never needs it)."""

    def __init__(self, trace: StreamedTrace) -> None:
        self.trace = trace
        self._read: Iterator[Turn] = trace.read()
        self._next = 0  # the request the reader reaches next
        self._held: dict[int, Turn] = {}
        self.rereads = 0

    def __len__(self) -> int:
        return self.trace.index.n

    def __getitem__(self, rid: int) -> Turn:
        turn = self._held.get(rid)
        if turn is not None:
            return turn
        if not 0 <= rid < len(self):
            raise IndexError(rid)
        if rid < self._next:
            self.rereads += 1
            return next(t for t in self.trace.read() if t.request_id == rid)
        held = self._held
        for turn in self._read:
            held[turn.request_id] = turn
            if turn.request_id == rid:
                self._next = rid + 1
                return turn
        raise IndexError(rid)  # pragma: no cover - the index counted every request

    def release(self, rid: int) -> None:
        self._held.pop(rid, None)

    @property
    def held(self) -> int:
        """Requests read and not yet released."""
        return len(self._held)


@frozen
class StreamedWorkload(Workload):
    """A :class:`Workload` whose requests a :class:`StreamedTrace` reads as the replay goes."""

    trace: StreamedTrace = field(default=None, kw_only=True)

    @property
    def num_requests(self) -> int:
        return self.trace.index.n

    def turns(self) -> list[Turn]:
        out: list[Turn] = list(self.trace.read())
        return out

    def each_turn(self) -> Iterator[Turn]:
        return self.trace.read()

    def turn_source(self) -> TurnReader:
        return TurnReader(self.trace)

    def request_columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[int]]:
        index = self.trace.index
        return index.input_length, index.output_length, index.lora

    def session_columns(self) -> tuple[Sequence[str], Sequence[int], Sequence[int]]:
        index = self.trace.index
        return _SessionOf(index), index.session, index.next_turn

    def first_turn_columns(self) -> tuple[Sequence[float], Sequence[int]]:
        return self.trace.index.start, self.trace.index.first_rid

    def line_of(self, rid: int) -> int | None:
        return self.trace.index.line[rid]

    def has_dependencies(self) -> bool:
        return False  # a streaming format's turns wait for their session alone

    def set_adapter(self, name: str, rids: Sequence[int], lora: int) -> None:
        self.trace.set_adapter(name, rids, lora)

    def set_unique_from(self, marks: Sequence[int]) -> None:
        self.trace.unique_from = marks

    def named_classes(self) -> dict[int, str]:
        return self.trace.index.slo_class

    def set_priorities(self, priorities: Sequence[int | None]) -> None:
        self.trace.priority = priorities

    def held(self) -> Workload:
        """The whole trace as objects (module docstring)."""
        return Workload(self.trace.sessions(), self.source, self.lora_names, self.client_concurrency,
                        self.client_warmups)


class _SessionOf(Sequence[str]):
    """Each request's session id, from the columns."""

    def __init__(self, index: TraceIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return self._index.n

    def __getitem__(self, rid: Any) -> Any:
        if isinstance(rid, slice):
            return [self[r] for r in range(*rid.indices(len(self)))]
        return self._index.session_ids[self._index.session[rid]]
