"""Which session each line of a Mooncake trace joins, and its turn's delay (dynamo-mocker.md
§9.1; the rules are the reference reader's, Dynamo's ``loadgen/trace.rs``), kept in per-session
and per-request columns (servesim.workload.mooncake reads the lines)."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any, Protocol

from servesim.errors import TraceError


class _Record(Protocol):
    """What placing a line needs of its record (servesim.workload.mooncake reads it)."""

    session: str | None
    timestamp: float | None
    delay: float | None


class SessionOrder:
    """Which session each record joins, in file order, and its turn's delay, with per-session
    and per-request columns instead of a map keyed by every session id (a trace of single
    requests has as many sessions as lines). A record without ``session_id`` starts session
    ``request_<line>``, which a later record may join by naming it; a record may also start
    a session whose id a later line's default id equals."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.named: dict[str, int] = {}  # a session id a record named -> its session index
        self.names: dict[int, str] = {}  # the reverse, for the sessions that have one
        self.first_line = array("q")  # per session: the line of its first turn
        self.last_ts = array("d")  # per session: its latest turn's timestamp (nan: none)
        self.lines = array("q")  # per request: its line (ascending)
        self.session = array("q")  # per request: its session index
        self.span = _Span()
        self.lora_ids: dict[int | str, int] = {}
        self.lora_names: dict[str, list[int]] = {}

    def add(self, lineno: int, rec: _Record) -> tuple[int, float]:
        """The session index of the record on line ``lineno`` (the next index for a new
        session) and its turn's delay."""
        sid = rec.session if rec.session is not None else f"request_{lineno}"
        idx = self.named.get(sid)
        if idx is None and rec.session is not None:
            idx = self._default_session(sid)
            if idx is not None:
                self.named[sid] = idx
        first = idx is None
        try:
            delay = _turn_delay(rec, first, None if idx is None else self._last_ts(idx))
            self.span.add(sid, rec.timestamp if first else None, delay)
        except ValueError as exc:
            raise TraceError(str(exc), file=self.path, line=lineno) from None
        if idx is None:
            idx = len(self.first_line)
            self.first_line.append(lineno)
            self.last_ts.append(math.nan)
            if rec.session is not None:
                self.named[sid] = idx
                self.names[idx] = sid
        if rec.timestamp is not None:
            self.last_ts[idx] = rec.timestamp
        self.lines.append(lineno)
        self.session.append(idx)
        return idx, delay

    def _last_ts(self, idx: int) -> float | None:
        ts = self.last_ts[idx]
        return None if math.isnan(ts) else ts

    def _default_session(self, sid: str) -> int | None:
        """The session a record without ``session_id`` started whose default id is ``sid``."""
        digits = sid[8:] if sid.startswith("request_") else ""
        if not digits.isdigit() or sid != f"request_{int(digits)}":
            return None
        line = int(digits)
        at = bisect_left(self.lines, line)
        if at == len(self.lines) or self.lines[at] != line:
            return None
        idx = self.session[at]
        return idx if self.first_line[idx] == line and idx not in self.names else None

    def session_ids(self) -> SessionIds:
        """Each session's id by index, for the sessions placed so far and those to come."""
        return SessionIds(self.names, self.first_line)

    def lora_id(self, lora: int | str | None, rid: int) -> int:
        """The adapter id of a record's ``lora`` (0: none); a name gets one the first time."""
        if lora is None:
            return 0
        if isinstance(lora, str):
            self.lora_names.setdefault(lora, []).append(rid)
            return self.lora_ids.setdefault(lora, _next_lora_id(self.lora_ids))
        return self.lora_ids.setdefault(lora, lora)

    def lora_ids_now(self, lora: int | str | None) -> int:
        """:meth:`lora_id` once every record was read (an adapter name's id may have been
        resolved to a served module's since, servesim.replay.adapter_names)."""
        return 0 if lora is None else self.lora_ids[lora]


class SessionIds(Sequence[str]):
    """Each session's id by index: the one its records name, else ``request_<first line>``."""

    __slots__ = ("names", "first_line")

    def __init__(self, names: dict[int, str], first_line: array) -> None:
        self.names = names
        self.first_line = first_line

    def __len__(self) -> int:
        return len(self.first_line)

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        name = self.names.get(idx)
        return name if name is not None else f"request_{self.first_line[idx]}"


def _next_lora_id(ids: dict[int | str, int]) -> int:
    """The id a newly seen adapter name gets: one past every id given or assigned so far (so a
    name never takes an integer id the trace uses earlier; one used later is the trace's
    own choice, and refers to a different adapter)."""
    return max(ids.values(), default=0) + 1


class _Span:
    """Keeps the simulated times a trace implies finite: the spread of first-turn timestamps
    and each session's summed delays (1e308-sized values would overflow the clock)."""

    def __init__(self) -> None:
        self.low = math.inf
        self.high = -math.inf
        self.delays: dict[str, float] = {}

    def add(self, sid: str, first_ts: float | None, delay: float) -> None:
        if first_ts is not None:
            self.low, self.high = min(self.low, first_ts), max(self.high, first_ts)
            if not math.isfinite(self.high - self.low):
                raise ValueError(
                    f"timestamp {first_ts:g} is too far from the others "
                    f"(they span {self.low:g} to {self.high:g} ms)"
                )
        if not delay:
            return  # (zero delays add nothing: most sessions never get an entry)
        total = self.delays.get(sid, 0.0) + delay
        if not math.isfinite(total):
            raise ValueError(f"the delays of session {sid!r} add up to more than a float holds")
        self.delays[sid] = total


def _turn_delay(rec: _Record, first: bool, prev_ts: float | None) -> float:
    if first:
        if rec.delay:
            raise ValueError("a non-zero 'delay' is not allowed on a session's first turn")
        return 0.0
    if rec.delay is not None:
        return rec.delay
    if rec.timestamp is not None:
        if prev_ts is None:
            raise ValueError(
                "cannot infer the turn's delay from 'timestamp': the previous turn of the "
                "session has none (give 'delay')"
            )
        gap = rec.timestamp - prev_ts
        if gap < 0:
            raise ValueError(
                f"timestamp {rec.timestamp:g} is before the previous turn's {prev_ts:g} "
                "and no 'delay' is given"
            )
        return gap
    return 0.0
