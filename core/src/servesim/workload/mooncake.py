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
from collections.abc import Callable, Iterable
from typing import Any

from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload
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
    """Reader registered as the ``mooncake`` trace format."""

    @classmethod
    def read(
        cls, path: str, *, trace_block_size: int = 512, options: dict[str, Any] | None = None
    ) -> Workload:
        if trace_block_size <= 0:
            raise TraceError(f"trace_block_size must be > 0, got {trace_block_size}", file=path)
        return cls.parse_lines(iter_text_lines(path, "trace"), path, trace_block_size)

    @classmethod
    def parse_lines(cls, lines: Iterable[str], path: str, trace_block_size: int) -> Workload:
        sessions: dict[str, Session] = {}
        last_ts: dict[str, float | None] = {}
        span = _Span()
        lora_ids: dict[int | str, int] = {}
        lora_names: dict[str, list[int]] = {}
        rid = 0
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
            sid = rec.session if rec.session is not None else f"request_{lineno}"
            session = sessions.get(sid)
            try:
                delay = _turn_delay(rec, session is None, last_ts.get(sid))
                span.add(sid, rec.timestamp if session is None else None, delay)
            except ValueError as exc:
                raise TraceError(str(exc), file=path, line=lineno) from None
            full = len(rec.hash_ids) * trace_block_size
            length = full if rec.input_length is None else min(rec.input_length, full)
            prompt = RepeatedBlockTokens(rec.hash_ids, trace_block_size, length)
            turn = Turn(rid, prompt, rec.output_length, delay, lineno)
            if rec.priority:
                turn.priority = rec.priority
            if rec.lora is not None:
                lora = rec.lora
                if isinstance(lora, str):
                    turn.lora = lora_ids.setdefault(lora, _next_lora_id(lora_ids))
                    lora_names.setdefault(lora, []).append(rid)
                else:
                    turn.lora = lora_ids.setdefault(lora, lora)
            if rec.slo_class is not None:
                turn.slo_class = rec.slo_class
            rid += 1
            if session is None:
                session = sessions[sid] = Session(sid, rec.timestamp)
            session.turns.append(turn)
            if rec.timestamp is not None:
                last_ts[sid] = rec.timestamp
        return make_workload(list(sessions.values()), path, lora_names)


def _next_lora_id(ids: dict[int | str, int]) -> int:
    """The id a newly seen adapter name gets: one past every id given or assigned so far (so a
    name never takes an integer id the trace uses earlier; one used later is the trace's
    own choice, and refers to a different adapter)."""
    return max(ids.values(), default=0) + 1


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
