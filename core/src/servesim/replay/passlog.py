"""The pass log: one JSON line per engine pass (issue 9 item 1).

Each line says what one rank's pass did::

    {"worker":0,"dp_rank":0,"pass":3,"start_ms":12.5,"end_ms":14.0,
     "scheduled":{"7":1,"9":256},"new_hits":{"9":64},"resumed":{},"preempted":[],
     "finished":["7"],"running":1,"waiting":4,"free_blocks":88}

``scheduled`` maps request id → tokens computed in the pass, in batch order; ``new_hits`` the
prefix-cache hit (tokens) of requests admitted for the first time; ``resumed`` maps requests
readmitted after a preemption to their hit on readmission (the vLLM oracle's shape; ``null``
when the rank did not report it); ``preempted`` / ``finished`` requests preempted / finished in
the pass; ``running``, ``waiting`` and ``free_blocks`` are the counts after the pass. Request ids
are strings — the trace's 0-based line index by default — so the log compares directly with
the vLLM oracle's step lines (``servesim_vllm.conformance``).

A rank may report more (``ScheduleRecord.engine_fields``): the fields its engine's own step
trace writes, under the same names, appended after the common ones in :data:`ENGINE_FIELDS`
order. The ``sglang`` rank reports the SGLang oracle's (``sglang_sched_trace.py``)::

    "mode":"prefill","prefill":{"9":256},"decode":[],"chunked":"9","retracted":[],
    "running_batch":1,"extend_tokens":256,"free_tokens":1744,"evictable_tokens":0,
    "protected_tokens":240,"new_token_ratio":0.7

``mode`` is ``prefill``/``decode``/``idle``, or ``mixed`` for a prefill batch the running
requests decode in (``engine.sglang.enable_mixed_chunk``); ``prefill`` maps the extend part of
the batch to its tokens in batch order, ``decode`` lists the requests decoded; ``chunked`` is the request
whose prefill is still unfinished after the pass (or null); ``retracted`` the requests
retracted; ``running_batch`` the size of SGLang's running batch after the step (a prefill
batch joins it at the next step); ``free_tokens`` / ``evictable_tokens`` /
``protected_tokens`` the pool's free slots and the radix tree's unlocked / locked tokens;
``new_token_ratio`` the admission ratio after the step (rounded to 6 places).

Lines are written with a fixed key order and compact separators, so the same run gives the same
bytes. The source is :class:`servesim.contract.ScheduleRecord`, filled by ranks built with
``RankServices.record_schedule``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

import attrs
from attrs import frozen

from servesim.contract import RequestId, ScheduleRecord
from servesim.errors import TraceError
from servesim.sinks.base import SinkError
from servesim.workload.textlines import iter_text_lines, json_values

if TYPE_CHECKING:
    from pathlib import Path

#: The keys of a pass-log line, in the order they are written.
FIELDS = (
    "worker",
    "dp_rank",
    "pass",
    "start_ms",
    "end_ms",
    "scheduled",
    "new_hits",
    "resumed",
    "preempted",
    "finished",
    "running",
    "waiting",
    "free_blocks",
)

#: Backend-reported fields a line may carry after :data:`FIELDS`, in writing order, each with
#: the JSON kind it must have: ``ids`` a list of request ids, ``id?`` one or null, ``map`` an
#: object of request id → int, ``int`` a non-negative int, ``num`` a finite number, ``str``.
ENGINE_FIELDS: dict[str, str] = {
    "mode": "str",
    "prefill": "map",
    "decode": "ids",
    "chunked": "id?",
    "retracted": "ids",
    "running_batch": "int",
    "extend_tokens": "int",
    "free_tokens": "int",
    "evictable_tokens": "int",
    "protected_tokens": "int",
    "new_token_ratio": "num",
}

IdMap = Mapping[RequestId, str] | Callable[[RequestId], str]


@frozen(slots=True)
class PassLogLine:
    """One parsed pass-log line (request ids as strings)."""

    worker: int
    dp_rank: int
    pass_index: int
    start_ms: float
    end_ms: float
    scheduled: dict[str, int]
    new_hits: dict[str, int]
    resumed: dict[str, int | None]
    preempted: list[str]
    finished: list[str]
    running: int
    waiting: int
    free_blocks: int
    engine_fields: dict[str, Any] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The line as a dict in :data:`FIELDS` order (``pass`` for ``pass_index``), then
        the engine fields in :data:`ENGINE_FIELDS` order."""
        return {
            "worker": self.worker,
            "dp_rank": self.dp_rank,
            "pass": self.pass_index,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "scheduled": dict(self.scheduled),
            "new_hits": dict(self.new_hits),
            "resumed": dict(self.resumed),
            "preempted": list(self.preempted),
            "finished": list(self.finished),
            "running": self.running,
            "waiting": self.waiting,
            "free_blocks": self.free_blocks,
            **{k: self.engine_fields[k] for k in ENGINE_FIELDS if k in self.engine_fields},
        }


def _id_fn(ids: IdMap | None) -> Callable[[RequestId], str]:
    if ids is None:
        return str
    if callable(ids):
        return ids
    mapping = ids
    return lambda rid: mapping[rid]


def make_line(
    worker: int,
    dp_rank: int,
    pass_index: int,
    start_ms: float,
    end_ms: float,
    record: ScheduleRecord,
    ids: IdMap | None = None,
) -> PassLogLine:
    """Build a line from a rank's record; ``ids`` maps servesim request ids to log ids.

    ``ScheduleRecord.new_hits`` covers every admission from the waiting queue; the log splits
    it: first admissions go to ``new_hits``, readmissions (ids in ``record.resumed``) carry
    their hit in ``resumed``.
    """
    f = _id_fn(ids)
    resumed = set(record.resumed)
    hits = record.new_hits
    return PassLogLine(
        worker=int(worker),
        dp_rank=int(dp_rank),
        pass_index=int(pass_index),
        start_ms=float(start_ms),
        end_ms=float(end_ms),
        scheduled={f(r): int(t) for r, t in record.scheduled.items()},
        new_hits={f(r): int(t) for r, t in hits.items() if r not in resumed},
        resumed={f(r): (int(hits[r]) if r in hits else None) for r in record.resumed},
        preempted=[f(r) for r in record.preempted],
        finished=[f(r) for r in record.finished],
        running=int(record.running),
        waiting=int(record.waiting),
        free_blocks=int(record.free_blocks),
        engine_fields=_engine_fields(record.engine_fields, f),
    )


def _engine_fields(raw: Mapping[str, Any], f: Callable[[RequestId], str]) -> dict[str, Any]:
    """The record's engine fields with request ids mapped to log ids; unknown names dropped."""
    out: dict[str, Any] = {}
    for k, kind in ENGINE_FIELDS.items():
        if k not in raw:
            continue
        v = raw[k]
        if kind == "ids":
            v = [f(r) for r in v]
        elif kind == "map":
            v = {f(r): int(t) for r, t in v.items()}
        elif kind == "id?":
            v = None if v is None else f(v)
        out[k] = v
    return out


def dumps(line: PassLogLine) -> str:
    """One JSON line (no trailing newline); floats in Python's shortest round-trip form."""
    return json.dumps(line.to_json(), separators=(",", ":"), allow_nan=False)


class PassLogWriter:
    """Writes pass-log lines to a path or an open text stream, in the order given.

    The driver calls :meth:`write` once per rank that reported a ``ScheduleRecord`` for a
    completed pass. ``ids`` (a mapping or a function) turns servesim request ids into the
    log's ids; the default is ``str(request_id)``, which is the trace line index when the
    replay numbers requests by line.
    """

    def __init__(self, target: str | Path | IO[str], ids: IdMap | None = None) -> None:
        pathlib = sys.modules.get("pathlib")  # not imported at start-up; a Path implies it is
        if isinstance(target, str) or (pathlib is not None and isinstance(target, pathlib.Path)):
            self._f: IO[str] = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._owned = True
            self.name = str(target)
        else:
            self._f = target
            self._owned = False
            self.name = getattr(target, "name", "<stream>")
        self._ids = _id_fn(ids)
        self.lines_written = 0

    def write(
        self,
        worker: int,
        dp_rank: int,
        pass_index: int,
        start_ms: float,
        end_ms: float,
        record: ScheduleRecord,
        ids: IdMap | None = None,
    ) -> PassLogLine:
        """Append one line; ``ids`` overrides the writer's mapping for this line."""
        if not (math.isfinite(start_ms) and math.isfinite(end_ms)):
            raise ValueError(f"pass {pass_index}: non-finite time {start_ms!r}..{end_ms!r}")
        line = make_line(worker, dp_rank, pass_index, start_ms, end_ms, record, ids or self._ids)
        try:
            self._f.write(dumps(line) + "\n")
        except OSError as exc:
            raise self._failed(exc, end_ms) from None
        self.lines_written += 1
        return line

    def _failed(self, exc: OSError, at_ms: float | None = None) -> SinkError:
        """A write that failed (a full disk), as the one-line error a sink failure is."""
        when = "" if at_ms is None else f" at {at_ms} ms"
        return SinkError(f"pass log {self.name}: cannot write{when}: {exc.strerror or exc}")

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def close(self) -> None:
        try:
            if self._owned:
                self._f.close()
            else:
                self._f.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def __enter__(self) -> PassLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- reading


def _expect(cond: bool, msg: str, file: str, lineno: int) -> None:
    if not cond:
        raise TraceError(msg, file=file, line=lineno)


def _int_map(v: Any, key: str, file: str, lineno: int) -> dict[str, int]:
    _expect(isinstance(v, dict), f"'{key}' must be an object of request id → int", file, lineno)
    for k, t in v.items():
        ok = isinstance(t, int) and not isinstance(t, bool)
        _expect(ok, f"'{key}'[{k!r}] must be an int", file, lineno)
    return {str(k): int(t) for k, t in v.items()}


def _hit_map(v: Any, key: str, file: str, lineno: int) -> dict[str, int | None]:
    msg = f"'{key}' must be an object of request id → int or null"
    _expect(isinstance(v, dict), msg, file, lineno)
    for k, t in v.items():
        ok = t is None or (isinstance(t, int) and not isinstance(t, bool))
        _expect(ok, f"'{key}'[{k!r}] must be an int or null", file, lineno)
    return {str(k): (None if t is None else int(t)) for k, t in v.items()}


def _id_list(v: Any, key: str, file: str, lineno: int) -> list[str]:
    _expect(isinstance(v, list), f"'{key}' must be a list of request ids", file, lineno)
    return [str(x) for x in v]


def parse_line(obj: Any, file: str = "<pass log>", lineno: int = 1) -> PassLogLine:
    """Validate one decoded line; errors name ``file:line`` (TraceError)."""
    _expect(isinstance(obj, dict), "a pass-log line must be a JSON object", file, lineno)
    missing = [k for k in FIELDS if k not in obj]
    _expect(not missing, f"missing key(s) {', '.join(missing)}", file, lineno)
    unknown = sorted(set(obj) - set(FIELDS) - set(ENGINE_FIELDS))
    _expect(not unknown, f"unknown key(s) {', '.join(unknown)}", file, lineno)
    for k in ("worker", "dp_rank", "pass", "running", "waiting", "free_blocks"):
        v = obj[k]
        _expect(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                f"'{k}' must be a non-negative int, got {v!r}", file, lineno)
    for k in ("start_ms", "end_ms"):
        v = obj[k]
        _expect(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
                f"'{k}' must be a finite number, got {v!r}", file, lineno)
    _expect(obj["end_ms"] >= obj["start_ms"], "'end_ms' is before 'start_ms'", file, lineno)
    return PassLogLine(
        worker=obj["worker"],
        dp_rank=obj["dp_rank"],
        pass_index=obj["pass"],
        start_ms=float(obj["start_ms"]),
        end_ms=float(obj["end_ms"]),
        scheduled=_int_map(obj["scheduled"], "scheduled", file, lineno),
        new_hits=_int_map(obj["new_hits"], "new_hits", file, lineno),
        resumed=_hit_map(obj["resumed"], "resumed", file, lineno),
        preempted=_id_list(obj["preempted"], "preempted", file, lineno),
        finished=_id_list(obj["finished"], "finished", file, lineno),
        running=obj["running"],
        waiting=obj["waiting"],
        free_blocks=obj["free_blocks"],
        engine_fields={k: _engine_value(obj[k], k, kind, file, lineno)
                       for k, kind in ENGINE_FIELDS.items() if k in obj},
    )


def _engine_value(v: Any, key: str, kind: str, file: str, lineno: int) -> Any:
    if kind == "ids":
        return _id_list(v, key, file, lineno)
    if kind == "map":
        return _int_map(v, key, file, lineno)
    if kind == "id?":
        return None if v is None else str(v)
    if kind == "int":
        _expect(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                f"'{key}' must be a non-negative int, got {v!r}", file, lineno)
    elif kind == "num":
        _expect(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
                f"'{key}' must be a finite number, got {v!r}", file, lineno)
    else:
        _expect(isinstance(v, str), f"'{key}' must be a string, got {v!r}", file, lineno)
    return v


def iter_pass_log(path: str | Path) -> Iterator[PassLogLine]:
    """Parse a pass log lazily; blank lines are skipped, bad lines (and an unreadable file)
    raise TraceError."""
    name = str(path)
    for lineno, obj in json_values(iter_text_lines(name, "pass log"), name):
        yield parse_line(obj, name, lineno)


def read_pass_log(path: str | Path) -> list[PassLogLine]:
    return list(iter_pass_log(path))
