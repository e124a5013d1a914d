"""The ``applied_compute_agentic`` trace format: one agent session per line, as Dynamo
1.6.1's replay reads it (``loadgen/trace.rs``, ``Trace::from_applied_compute_agentic``;
dynamo-mocker.md §9.1).

A line has ``num_turns``, ``input_prompt_length`` (> 0), ``assistant_response_length``,
``tool_call_output_length`` and ``tool_call_latency`` (seconds; lists of ``num_turns``
values) and ``final_assistant_response_length``. The session has ``num_turns + 1`` turns:
turn *k* has the current input and outputs ``assistant_response_length[k]``; the input then
grows by that response and ``tool_call_output_length[k]``, and the next turn waits
``tool_call_latency[k] * 1000`` ms after turn *k* finishes; the last turn outputs
``final_assistant_response_length``. Lines carry no timestamps, so the trace needs
closed-loop ``workload.concurrency``, as in the reference.

Prompt blocks extend turn by turn: a new block is a fresh id (1, 2, ... over the file), except
that with the reader options ``shared_prefix_ratio`` > 0 and ``num_prefix_groups`` > 0 (the
reference's ``trace_shared_prefix_ratio`` / ``trace_num_prefix_groups``, accepted under
those names too) the first ``round(ceil(input_prompt_length / trace_block_size) * ratio)``
blocks of line *i* are group ``i mod groups``'s shared blocks, with the reference's ids
``0xA63E000000000000 | group << 32 | block``.
"""

from __future__ import annotations

import math
from typing import Any

from servesim.errors import ConfigError, TraceError
from servesim.tokens import RepeatedBlockTokens
from servesim.workload.model import Session, Turn, Workload, make_workload

from servesim_agentic.graph import finite_field, int_field, json_lines

_SHARED_TAG = 0xA63E_0000_0000_0000
_LISTS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")


def _options(options: dict[str, Any] | None) -> tuple[float, int]:
    opts = dict(options or {})
    out: dict[str, Any] = {}
    for key, ref in (("shared_prefix_ratio", "trace_shared_prefix_ratio"),
                     ("num_prefix_groups", "trace_num_prefix_groups")):
        given = [k for k in (key, ref) if k in opts]
        if len(given) > 1:
            raise ConfigError(f"both {key!r} and {ref!r} are given; use one",
                              path=f"workload.trace.options.{ref}")
        out[key] = opts.pop(given[0]) if given else None
    if opts:
        raise ConfigError(f"unknown option {sorted(opts)[0]!r} (known: shared_prefix_ratio, "
                          "num_prefix_groups)", path=f"workload.trace.options.{sorted(opts)[0]}")
    ratio = 0.0 if out["shared_prefix_ratio"] is None else out["shared_prefix_ratio"]
    groups = 0 if out["num_prefix_groups"] is None else out["num_prefix_groups"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"expected a number in [0, 1], got {ratio!r}",
                          path="workload.trace.options.shared_prefix_ratio")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 0:
        raise ConfigError(f"expected an integer >= 0, got {groups!r}",
                          path="workload.trace.options.num_prefix_groups")
    return float(ratio), groups


class _Ids:
    """Block ids of one line's growing prompt."""

    def __init__(self, shared: int, group: int | None, next_unique: int) -> None:
        self.ids: list[int] = []
        self.shared = shared
        self.group = group
        self.next_unique = next_unique

    def extend(self, length: int, block: int) -> None:
        while len(self.ids) < -(-length // block):
            i = len(self.ids)
            if i < self.shared and self.group is not None:
                self.ids.append(_SHARED_TAG | (self.group << 32) | i)
            else:
                self.ids.append(self.next_unique)
                self.next_unique += 1


def _session(obj: Any, lineno: int, block: int, ratio: float, groups: int, next_unique: int,
             rid: int) -> tuple[Session, int]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    n = int_field("num_turns", obj.get("num_turns"))
    lists = {}
    for key in _LISTS:
        value = obj.get(key)
        if not isinstance(value, list) or len(value) != n:
            raise ValueError(f"field {key!r}: expected a list of num_turns ({n}) values, got {value!r}")
        lists[key] = value
    length = int_field("input_prompt_length", obj.get("input_prompt_length"), 1)
    final = int_field("final_assistant_response_length", obj.get("final_assistant_response_length"))
    group = (lineno - 1) % groups if ratio > 0.0 and groups > 0 else None
    # rounded half away from zero, as Rust's f64::round
    ids = _Ids(math.floor(-(-length // block) * ratio + 0.5), group, next_unique)
    ids.extend(length, block)
    turns = []
    delay = 0.0
    for k in range(n + 1):
        out = final if k == n else int_field(f"assistant_response_length[{k}]",
                                             lists["assistant_response_length"][k])
        turns.append(Turn(rid + k, RepeatedBlockTokens(list(ids.ids), block, length), out, delay, lineno))
        if k == n:
            break
        latency = finite_field(f"tool_call_latency[{k}]", lists["tool_call_latency"][k])
        length += out + int_field(f"tool_call_output_length[{k}]", lists["tool_call_output_length"][k])
        ids.extend(length, block)
        delay = latency * 1000.0
    if not math.isfinite(sum(t.delay_ms for t in turns)):
        raise ValueError("field 'tool_call_latency': the delays overflow")
    return Session(f"applied_compute_agentic_session_{lineno}", None, turns), ids.next_unique


class AppliedComputeAgenticTrace:
    """Reader registered as the ``applied_compute_agentic`` trace format."""

    @classmethod
    def read(cls, path: str, *, trace_block_size: int = 512,
             options: dict[str, Any] | None = None) -> Workload:
        ratio, groups = _options(options)
        sessions = []
        next_unique = 1
        rid = 0
        for lineno, value in json_lines(path):
            try:
                session, next_unique = _session(value, lineno, trace_block_size, ratio,
                                                groups, next_unique, rid)
            except ValueError as exc:
                raise TraceError(str(exc), file=path, line=lineno) from None
            rid += len(session.turns)
            sessions.append(session)
        if not sessions:
            raise TraceError("the trace holds no request", file=path)
        return make_workload(sessions, path)


__all__ = ["AppliedComputeAgenticTrace"]
