"""The built-in ``mooncake`` trace format (Mooncake JSONL plus Dynamo's extensions).

Fields (dynamo-mocker.md §9.1, ecosystem.md §1): ``timestamp`` (ms; alias ``created_time``),
``input_length`` (alias ``input_tokens``; optional, defaults to and is clamped to
``len(hash_ids) * trace_block_size``), ``output_length`` (alias ``output_tokens``; required,
at most ``MAX_OUTPUT_LENGTH``),
``hash_ids`` (required list of non-negative ints), ``session_id`` (optional; default
``request_<line>``), ``delay`` / ``delay_ms`` (a later turn's wait after the previous turn
finishes; forbidden on a session's first turn). A later turn without an explicit delay waits
``timestamp - previous timestamp`` of its session when both are given, else 0. ``priority``
(optional integer, default 0; lower is served first under a priority scheduling policy, as
vLLM's ``Request.priority``) and ``lora`` (optional LoRA adapter: an integer id >= 1, as vLLM's
``LoRARequest.lora_int_id``, or a non-empty name; absent or null means the base model), ``class``
(optional SLO class name, one of ``workload.classes``; docs/workloads.md). Unknown keys are
ignored so AIPerf's superset (``messages``, ``extra``...) still loads. Blank lines are skipped.

Validation follows the reference reader (Dynamo's ``loadgen/trace.rs``): ``hash_ids`` must not be
empty, ``input_length`` must be positive, a first turn may carry only a zero delay, a later
turn's delay inferred from timestamps needs the previous turn's timestamp. A first turn
without ``timestamp`` is accepted here and refused by timestamp-mode replay (concurrency mode
ignores timestamps), as in the reference.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload
from servesim.workload.mooncake_sessions import SessionOrder
from servesim.workload.textlines import iter_text_lines, read_text_lines

_ALIASES = {
    "timestamp": ("timestamp", "created_time"),
    "input_length": ("input_length", "input_tokens"),
    "output_length": ("output_length", "output_tokens"),
}


def _pick(obj: dict[str, Any], name: str) -> tuple[str, Any] | None:
    found = [(k, obj[k]) for k in _ALIASES.get(name, (name,)) if k in obj]
    if len(found) > 1:
        raise ValueError(f"both {found[0][0]!r} and {found[1][0]!r} are given; use one")
    return found[0] if found else None


# The longest output a trace line may ask for: the bound synthetic lengths have
# (servesim.workload.synthetic.MAX_LENGTH). A request that long already takes millions of
# passes; a larger count is a typo, and ranks size per-request block tables by it.
MAX_OUTPUT_LENGTH = 1 << 24


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _non_negative_int(key: str, v: Any) -> int:
    if not _is_int(v) or v < 0:
        raise ValueError(f"{key!r} must be a non-negative integer, got {v!r}")
    return int(v)


def _finite(key: str, v: Any, *, non_negative: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key!r} must be a finite number, got {v!r}")
    if non_negative and v < 0:
        raise ValueError(f"{key!r} must be >= 0, got {v!r}")
    return float(v)


_INTS = {int}


def _hash_ids(v: Any) -> list[int]:
    if type(v) is list and set(map(type, v)) == _INTS and min(v) >= 0:
        return v  # the common case, checked without a Python loop
    if not isinstance(v, list):
        raise ValueError(f"'hash_ids' must be a list of integers, got {type(v).__name__}")
    for i, h in enumerate(v):
        if not _is_int(h) or h < 0:
            raise ValueError(f"'hash_ids[{i}]' must be a non-negative integer, got {h!r}")
    return v


def _lora(v: Any) -> int | str | None:
    if v is None:
        return None
    if _is_int(v) and v >= 1:
        return int(v)
    if isinstance(v, str) and v:
        return v
    raise ValueError(f"'lora' must be an adapter id >= 1 or a non-empty name, got {v!r}")


class _Record:
    __slots__ = ("line", "timestamp", "input_length", "output_length", "hash_ids", "session", "delay",
                 "priority", "lora", "slo_class")

    def __init__(self, obj: Any, line: int) -> None:
        if type(obj) is dict and obj.keys() == _PLAIN and self._plain(obj, line):
            return
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        self.line = line
        hid = obj.get("hash_ids")
        if hid is None:
            raise ValueError("missing required field 'hash_ids'")
        self.hash_ids = _hash_ids(hid)
        if not self.hash_ids:
            raise ValueError("'hash_ids' must not be empty")
        out = _pick(obj, "output_length")
        if out is None:
            raise ValueError("missing required field 'output_length'")
        self.output_length = _non_negative_int(*out)
        if self.output_length > MAX_OUTPUT_LENGTH:
            raise ValueError(f"{out[0]!r} must be at most {MAX_OUTPUT_LENGTH}, got {self.output_length}")
        inp = _pick(obj, "input_length")
        self.input_length = None if inp is None else _non_negative_int(*inp)
        if self.input_length == 0:
            raise ValueError("'input_length' must be positive")
        ts = _pick(obj, "timestamp")
        self.timestamp = None if ts is None else _finite(*ts, non_negative=False)
        sid = obj.get("session_id")
        if sid is not None and (isinstance(sid, bool) or not isinstance(sid, (str, int))):
            raise ValueError(f"'session_id' must be a string or an integer, got {sid!r}")
        self.session = None if sid is None else str(sid)
        delays = [k for k in ("delay", "delay_ms") if k in obj]
        if len(delays) > 1:
            raise ValueError("both 'delay' and 'delay_ms' are given; use one")
        self.delay = _finite(delays[0], obj[delays[0]], non_negative=True) if delays else None
        pri = obj.get("priority", 0)
        if not _is_int(pri):
            raise ValueError(f"'priority' must be an integer, got {pri!r}")
        self.priority = int(pri)
        self.lora = _lora(obj.get("lora"))
        cls = obj.get("class")
        if cls is not None and (not isinstance(cls, str) or not cls):
            raise ValueError(f"'class' must be a non-empty string, got {cls!r}")
        self.slo_class = cls

    def _plain(self, obj: dict[str, Any], line: int) -> bool:
        """The common record (exactly the four plain keys, well typed) without the general
        path's alias and error handling; False sends anything else through that path."""
        out, inp, ts = obj["output_length"], obj["input_length"], obj["timestamp"]
        if not (type(out) is int and 0 <= out <= MAX_OUTPUT_LENGTH and type(inp) is int and inp > 0
                and (type(ts) is int or (type(ts) is float and math.isfinite(ts)))):
            return False
        hid = obj["hash_ids"]
        if not (type(hid) is list and hid and set(map(type, hid)) == _INTS and min(hid) >= 0):
            return False
        self.line = line
        self.hash_ids = hid
        self.output_length = out
        self.input_length = inp
        self.timestamp = float(ts)
        self.session = None
        self.delay = None
        self.priority = 0
        self.lora = None
        self.slo_class = None
        return True


_PLAIN = frozenset(("timestamp", "input_length", "output_length", "hash_ids"))


class MooncakeTrace:
    """Reader registered as the ``mooncake`` trace format.

    :meth:`read` holds the whole trace as objects; :meth:`stream` reads it twice as a stream
    instead, first to check and index it, then as the replay reaches its requests
    (servesim.workload.streamed)."""

    @classmethod
    def read(
        cls, path: str, *, trace_block_size: int = 512, options: dict[str, Any] | None = None
    ) -> Workload:
        _check_block_size(trace_block_size, path)
        return cls.parse_lines(iter_text_lines(path, "trace"), path, trace_block_size)

    @classmethod
    def stream(
        cls, path: str, *, trace_block_size: int = 512, options: dict[str, Any] | None = None
    ) -> Workload:
        """The trace read as a stream; a path that is not a regular file (a pipe cannot be read
        twice) is held whole, as :meth:`read` holds it."""
        _check_block_size(trace_block_size, path)
        if not os.path.isfile(path):
            return cls.read(path, trace_block_size=trace_block_size, options=options)
        stamp = _stamp(path)

        def lines() -> Iterable[str]:
            if _stamp(path) != stamp:
                raise TraceError("the trace changed while it was replayed (it is read again as "
                                 "the replay goes)", file=path)
            return iter_text_lines(path, "trace")

        return cls.stream_lines(lines, path, trace_block_size)

    @classmethod
    def parse_lines(cls, lines: Iterable[str], path: str, trace_block_size: int) -> Workload:
        sessions: list[Session] = []
        order = SessionOrder(path)
        ids = order.session_ids()
        for rid, (lineno, rec) in enumerate(_records(lines, path)):
            idx, delay = order.add(lineno, rec)
            if idx == len(sessions):
                sessions.append(Session(ids[idx], rec.timestamp))
            lora = order.lora_id(rec.lora, rid)
            sessions[idx].turns.append(make_turn(rid, lineno, rec, delay, lora, trace_block_size))
        return make_workload(sessions, path, order.lora_names)

    @classmethod
    def stream_lines(cls, lines: Callable[[], Iterable[str]], path: str,
                     trace_block_size: int) -> Workload:
        """:meth:`stream` over the lines ``lines()`` gives (called once per pass)."""
        from servesim.workload.streamed import StreamedTrace, TraceIndex

        order = SessionOrder(path)
        index = TraceIndex(order.session, order.lines)
        for rid, (lineno, rec) in enumerate(_records(lines(), path)):
            idx, delay = order.add(lineno, rec)
            if idx == index.sessions:
                index.add_session(rec.timestamp)
            index.add_request(idx, delay, _input_length(rec, trace_block_size), rec.output_length,
                              order.lora_id(rec.lora, rid))
            if rec.slo_class is not None:
                index.slo_class[rid] = rec.slo_class
        index.session_ids = order.session_ids()

        def turns() -> Iterator[Turn]:
            for rid, (lineno, rec) in enumerate(_records(lines(), path)):
                yield make_turn(rid, lineno, rec, index.delay[rid], order.lora_ids_now(rec.lora),
                                trace_block_size)

        return StreamedTrace(index, turns, path, order.lora_names, order.lora_ids).workload()


def _stamp(path: str) -> tuple[int, int, int]:
    """What changes when a file is rewritten: its inode, size and modification time."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TraceError(f"cannot read trace: {exc.strerror or exc}", file=path) from None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _check_block_size(trace_block_size: int, path: str) -> None:
    if trace_block_size <= 0:
        raise TraceError(f"trace_block_size must be > 0, got {trace_block_size}", file=path)


def _records(lines: Iterable[str], path: str) -> Iterator[tuple[int, _Record]]:
    """``(line, record)`` for every non-blank line, each checked on its own; a problem is a
    TraceError naming the line."""
    for lineno, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            rec = _Record(_loads(text), lineno)
        except json.JSONDecodeError as exc:
            raise TraceError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=path,
                             line=lineno) from None
        except ValueError as exc:  # a field's value, or an integer too long to read
            raise TraceError(str(exc), file=path, line=lineno) from None
        except OverflowError as exc:
            raise TraceError(f"a number out of range: {exc}", file=path, line=lineno) from None
        except RecursionError:
            raise TraceError("JSON nested too deeply to read", file=path, line=lineno) from None
        yield lineno, rec


def _input_length(rec: _Record, trace_block_size: int) -> int:
    full = len(rec.hash_ids) * trace_block_size
    return full if rec.input_length is None else min(rec.input_length, full)


def make_turn(rid: int, lineno: int, rec: _Record, delay: float, lora: int,
              trace_block_size: int) -> Turn:
    """Request ``rid`` of record ``rec`` (line ``lineno``), its delay and adapter id known."""
    prompt = RepeatedBlockTokens(rec.hash_ids, trace_block_size, _input_length(rec, trace_block_size))
    turn = Turn(rid, prompt, rec.output_length, delay, lineno)
    if rec.priority:
        turn.priority = rec.priority
    if lora:
        turn.lora = lora
    if rec.slo_class is not None:
        turn.slo_class = rec.slo_class
    return turn


#: The C scanner json.loads ends in (the default decoder's; it keeps no state between calls).
_SCAN: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009


def _loads(text: str) -> Any:
    """``json.loads(text)`` without its Python-level wrappers when ``text`` starts with its
    value and ends with at most JSON whitespace after it; anything else goes to json.loads
    itself, so values and errors are exactly its own."""
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    if end == len(text) or not text[end:].strip(" \t\n\r"):
        return obj
    return json.loads(text)


def read_lines(path: str) -> list[str]:
    """The trace's lines (servesim.workload.textlines: unreadable paths and undecodable bytes are
    TraceErrors, the latter naming the line)."""
    return read_text_lines(path, "trace")
