"""A toy trace format: CSV lines ``timestamp_ms,input_length,output_length`` (a header line
``timestamp_ms,...`` is skipped). Every request is its own session with a unique prompt."""

from __future__ import annotations

from typing import Any

from servesim.errors import TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload


class CsvTrace:
    @classmethod
    def read(cls, path: str, *, trace_block_size: int, options: dict[str, Any] | None = None) -> Workload:
        try:
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            raise TraceError(f"cannot read: {exc.strerror or exc}", file=path) from None
        sessions: list[Session] = []
        for number, line in enumerate(lines, 1):
            if not line.strip() or line.startswith("timestamp_ms"):
                continue
            fields = line.split(",")
            try:
                at, isl, osl = float(fields[0]), int(fields[1]), int(fields[2])
            except (IndexError, ValueError):
                raise TraceError(f"expected timestamp_ms,input_length,output_length, got {line!r}",
                                 file=path, line=number) from None
            if isl < 1 or osl < 0 or not at >= 0:
                raise TraceError(f"bad values in {line!r}", file=path, line=number)
            rid = len(sessions)
            blocks = -(-isl // trace_block_size)
            # Hash ids unique to the request: no prefix is shared.
            prompt = RepeatedBlockTokens([rid * 1_000_003 + b for b in range(blocks)], trace_block_size, isl)
            sessions.append(Session(f"r{rid}", at, [Turn(rid, prompt, osl, line=number)]))
        return make_workload(sessions, path)
