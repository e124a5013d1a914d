"""A check kit for trace formats (``servesim_register_trace_formats``).

``check_trace_format(reader, good_path, malformed_path=None)`` reads sample files with the
reader a plugin registers and checks what the replay relies on (servesim.workload.model):

* ``reads_sample``: ``read(good_path, trace_block_size=...)`` returns a
  :class:`~servesim.workload.model.Workload` with at least one request;
* ``request_ids_dense``: request ids are ``0..n-1``, each once (the report and per-request
  records index by them);
* ``turns_valid``: every turn has a prompt of at least one token, an output length >= 0 and
  a finite delay >= 0, and every session a finite start time >= 0 or None;
* ``deterministic``: two reads give the same sessions, timestamps, prompts and outputs;
* ``missing_file_is_user_error``: a path that does not exist raises a
  :class:`~servesim.errors.UserError` (one line, exit 2), not ``OSError``;
* ``malformed_names_line`` (when ``malformed_path`` is given): reading it raises a
  :class:`~servesim.errors.TraceError` naming the file and a line number;
* ``streams_as_read`` (when the reader has ``stream``): the workload it streams holds the same
  sessions, requests and columns as the one ``read`` holds, and its malformed file raises
  the same error (servesim.workload.streamed).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable
from typing import Any

from servesim.errors import TraceError, UserError
from servesim.testing.conformance import ConformanceReport
from servesim.testing.kit import run_checks
from servesim.workload.model import Workload


class _Subject:
    def __init__(self, reader: Any, good: str, malformed: str | None, block: int) -> None:
        self.reader = reader
        self.good = good
        self.malformed = malformed
        self.block = block

    def read(self, path: str) -> Any:
        return self.reader.read(path, trace_block_size=self.block)


def _summary(workload: Workload) -> list[tuple[Any, ...]]:
    return [
        (
            s.session_id,
            s.start_ms,
            t.request_id,
            t.delay_ms,
            t.input_length,
            t.output_length,
            list(t.prompt.tokens(0, min(t.input_length, 64))),
        )
        for s in workload.sessions
        for t in s.turns
    ]


def check_reads_sample(s: _Subject) -> list[str]:
    workload = s.read(s.good)
    if not isinstance(workload, Workload):
        return [f"read returned {type(workload).__name__}, not a Workload"]
    return [] if workload.num_requests > 0 else ["the sample file gave no requests"]


def check_request_ids_dense(s: _Subject) -> list[str]:
    ids = sorted(t.request_id for session in s.read(s.good).sessions for t in session.turns)
    return [] if ids == list(range(len(ids))) else [f"request ids are {ids[:10]}..., expected 0..n-1"]


def check_turns_valid(s: _Subject) -> list[str]:
    bad = []
    for session in s.read(s.good).sessions:
        start = session.start_ms
        if start is not None and (not math.isfinite(start) or start < 0):
            bad.append(f"session {session.session_id!r}: start_ms {start!r}")
        for t in session.turns:
            if t.input_length < 1:
                bad.append(f"request {t.request_id}: prompt of {t.input_length} tokens")
            if t.output_length < 0:
                bad.append(f"request {t.request_id}: output length {t.output_length}")
            if not math.isfinite(t.delay_ms) or t.delay_ms < 0:
                bad.append(f"request {t.request_id}: delay_ms {t.delay_ms!r}")
    return bad[:10]


def check_deterministic(s: _Subject) -> list[str]:
    same = _summary(s.read(s.good)) == _summary(s.read(s.good))
    return [] if same else ["two reads of the sample file differ"]


def check_missing_file_is_user_error(s: _Subject) -> list[str]:
    missing = os.path.join(tempfile.gettempdir(), "servesim-trace-kit-no-such-file.jsonl")
    try:
        s.read(missing)
    except UserError:
        return []
    except Exception as exc:
        return [f"a missing file raised {type(exc).__name__}, not a UserError: {exc}"]
    return ["a missing file was read without an error"]


def check_malformed_names_line(s: _Subject) -> list[str]:
    if s.malformed is None:
        return []
    try:
        s.read(s.malformed)
    except TraceError as exc:
        if exc.line is None or os.path.basename(s.malformed) not in str(exc):
            return [f"the error does not name the file and line: {exc}"]
        return []
    except Exception as exc:
        return [f"a malformed file raised {type(exc).__name__}, not a TraceError: {exc}"]
    return ["a malformed file was read without an error"]


def check_streams_as_read(s: _Subject) -> list[str]:
    stream = getattr(s.reader, "stream", None)
    if stream is None:
        return []
    held, lazy = s.read(s.good), stream(s.good, trace_block_size=s.block)
    bad = []
    if _summary(lazy.held()) != _summary(held):
        bad.append("the streamed trace's sessions differ from read's")
    for name in ("request_columns", "session_columns", "first_turn_columns"):
        if [list(c) for c in getattr(lazy, name)()] != [list(c) for c in getattr(held, name)()]:
            bad.append(f"the streamed trace's {name}() differ from read's")
    if s.malformed is not None:
        errors = []
        for read in (s.read, lambda path: stream(path, trace_block_size=s.block)):
            try:
                read(s.malformed)
                errors.append("no error")
            except Exception as exc:  # noqa: BLE001 - compared, not handled
                errors.append(f"{type(exc).__name__}: {exc}")
        if errors[0] != errors[1]:
            bad.append(f"a malformed file: read gave {errors[0]!r}, stream {errors[1]!r}")
    return bad


TRACE_CHECKS = {
    "reads_sample": check_reads_sample,
    "request_ids_dense": check_request_ids_dense,
    "turns_valid": check_turns_valid,
    "deterministic": check_deterministic,
    "missing_file_is_user_error": check_missing_file_is_user_error,
    "malformed_names_line": check_malformed_names_line,
    "streams_as_read": check_streams_as_read,
}
"""Every trace-format check by name, in the order :func:`check_trace_format` runs them."""


def check_trace_format(
    reader: Any,
    good_path: str,
    malformed_path: str | None = None,
    *,
    trace_block_size: int = 16,
    skip: Iterable[str] = (),
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Run every trace-format check (minus ``skip``) on ``reader`` with the sample files."""
    subject = _Subject(reader, good_path, malformed_path, trace_block_size)
    return run_checks("trace format", TRACE_CHECKS, subject, skip=skip, raise_on_failure=raise_on_failure)


__all__ = ["TRACE_CHECKS", "check_trace_format"]
