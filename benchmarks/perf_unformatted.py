"""Replace the built-in JSONL sinks' line formatters with ones that write nothing.

``bench_sinks.py``'s ``jsonl-both-unformatted`` configuration runs the replay of
``jsonl-both`` with these in place: the KV events, the forward-pass metrics, the sink merge
buffer and the file writes all happen as before, but no text is made. The difference to
``jsonl-both`` is what formatting the lines costs; the difference to ``none`` is what
producing and ordering the events costs. Only a benchmark does this: the replay's output
files are empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The environment variable that makes ``perf_child.py`` call :func:`install` (set to ``1``).
ENV = "SERVESIM_BENCH_UNFORMATTED"


def _no_kv_lines(worker_id: int, at_ms: Any, events: Sequence[Any]) -> str:
    return ""


def _no_fpm_line(worker_id: int, at_ms: Any, m: Any) -> str:
    return ""


def _no_fpm_run_lines(worker_id: int, ats: Sequence[Any], run: Any) -> list[str]:
    return [""] * len(ats)


def install() -> None:
    """Swap the formatters the built-in sinks call (``servesim.sinks.builtin`` looks them up
    as module globals when it is not compiled, which the caller checks afterwards)."""
    import servesim.sinks.builtin as sinks

    sinks.kv_event_lines = _no_kv_lines
    sinks.fpm_line = _no_fpm_line
    sinks.fpm_run_lines = _no_fpm_run_lines
