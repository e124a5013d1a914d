"""Decisions recorded from Dynamo's planner, replayed without Dynamo (``recorded: PATH``).

A record is JSON: ``initial_tick_ms``, and ``ticks``, each the payload Dynamo's adapter was
given (``input``) and what it answered (``decision``). :class:`RecordedAdapter` stands in for
the adapter: tick ``k`` answers the ``k``-th recorded decision and notes where its payload
differs from the recorded one (``mismatches``: ``(tick, key)``), so a replay with the same
trace, engine and planner configuration reproduces the recorded run, and says where not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attrs import define, field


@define
class RecordedEvent:
    at_s: float
    component: str
    from_count: int
    to_count: int
    reason: str | None = None


@define
class RecordedDetails:
    total_ticks: int
    scaling_events: list[RecordedEvent]


def _first_difference(got: Any, want: Any, path: str = "") -> str | None:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in want or key not in got:
                return sub
            diff = _first_difference(got[key], want[key], sub)
            if diff is not None:
                return diff
        return None
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{path}[len {len(got)} != {len(want)}]"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            diff = _first_difference(g, w, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None
    return None if got == want else path


@define
class RecordedAdapter:
    """Replays ``ticks`` in order (see the module docs)."""

    initial_ms: float
    ticks: list[dict[str, Any]]
    mismatches: list[tuple[int, str]] = field(factory=list)
    events: list[RecordedEvent] = field(factory=list)
    at: int = 0

    @classmethod
    def load(cls, path: str | Path) -> RecordedAdapter:
        try:
            data = json.loads(Path(path).read_text())
            return cls(float(data["initial_tick_ms"]), list(data["ticks"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"recorded: cannot read {path}: {exc}") from None

    def initial_tick_ms(self) -> float:
        return self.initial_ms

    def on_tick(self, payload: dict[str, Any]) -> dict[str, Any]:
        k = self.at
        self.at += 1
        if k >= len(self.ticks):
            self.mismatches.append((k, "tick beyond the record"))
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": None}
        rec = self.ticks[k]
        diff = _first_difference(json.loads(json.dumps(payload)), rec["input"])
        if diff is not None:
            self.mismatches.append((k, diff))
        decision = dict(rec["decision"])
        self._note(payload, decision)
        return decision

    def _note(self, payload: dict[str, Any], decision: dict[str, Any]) -> None:
        """The scaling events Dynamo's adapter logs for this decision (agg: one ``agg``
        event; disagg: one per role that changes)."""
        now_s = payload["now_ms"] / 1000.0
        cur_p = payload["non_draining_prefill_count"]
        cur_d = payload["non_draining_decode_count"]
        tp, td = decision.get("target_prefill"), decision.get("target_decode")
        disagg = cur_p > 0 or tp not in (None, 0)
        roles = (("prefill", tp, cur_p), ("decode", td, cur_d)) if disagg else (("agg", td, cur_d),)
        for role, target, cur in roles:
            if target is not None and target != cur:
                self.events.append(RecordedEvent(now_s, role, cur, target,
                                                 "scale_up" if target > cur else "scale_down"))

    def finalize(self, lifecycle_operations: Any = None) -> RecordedDetails:
        return RecordedDetails(self.at, list(self.events))


__all__ = ["RecordedAdapter", "RecordedDetails", "RecordedEvent"]
