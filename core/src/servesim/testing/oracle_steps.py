"""Step-by-step comparison of a rank against a real scheduler's step lines (an oracle).

The oracles (``vllm_sched_trace.py``, ``sglang_sched_trace.py``) replay a trace and write one
JSON line per scheduler step; a backend's conformance kit (``servesim_vllm.conformance``,
``servesim_sglang.conformance``) drives its rank the same way and compares. This module holds
what every such kit shares: JSONL files, driving an engine step by step as an oracle does,
and the comparison with its first divergence.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from servesim.contract import Request, ScheduleRecord, Submit
from servesim.engine import Engine
from servesim.errors import EngineError
from servesim.replay.passlog import FIELDS

#: Fields of an oracle step line that servesim reproduces and the comparison checks: a pass-log
#: line's fields after its place (worker, dp rank, pass, start and end).
COMPARED_FIELDS = FIELDS[FIELDS.index("scheduled"):]

def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def drive_steps(
    engine: Engine,
    reqs: Sequence[Request],
    admit: str,
    per_step: int,
    to_step: Callable[[int, list[str], ScheduleRecord | None], dict[str, Any]],
    *,
    max_steps: int = 100_000,
) -> list[dict[str, Any]]:
    """Submit ``reqs`` as an oracle does — all before pass 0 (``admit: all``) or ``per_step``
    before each pass (``stepwise``) — run the engine pass by pass until it drains, and turn
    each pass's record into a step dict with ``to_step(step, admitted ids, record)``."""
    steps: list[dict[str, Any]] = []
    now = 0.0
    nxt = 0
    for step in range(max_steps):
        k = len(reqs) if admit == "all" else per_step
        admitted: list[str] = []
        while nxt < len(reqs) and len(admitted) < k and (admit != "all" or step == 0):
            engine.apply(0, Submit(reqs[nxt]), now)
            admitted.append(str(reqs[nxt].request_id))
            nxt += 1
        if nxt >= len(reqs) and engine.is_drained():
            return steps
        started = engine.execute_pass(now) if engine.is_ready() else None
        if started is None:
            raise EngineError(f"step {step}: engine not ready with work left")
        now = started.end_ms
        done = engine.complete_pass(started.pass_id, now)
        rec = done.by_rank[0].effects.schedule if done.by_rank else None
        steps.append(to_step(step, admitted, rec))
    raise EngineError(f"no drain after {max_steps} steps")


def normalize(step: dict[str, Any]) -> dict[str, Any]:
    """The compared view of a step line: batch order kept, id sets sorted numerically."""
    return {
        "scheduled": list(step.get("scheduled", {}).items()),
        "new_hits": sorted(step.get("new_hits", {}).items(), key=lambda kv: int(kv[0])),
        "resumed": sorted(step.get("resumed", {}).items(), key=lambda kv: int(kv[0])),
        "preempted": sorted(step.get("preempted", []), key=int),
        "finished": sorted(step.get("finished", []), key=int),
        "running": step.get("running"),
        "waiting": step.get("waiting"),
        "free_blocks": step.get("free_blocks"),
    }


@attrs.define
class Comparison:
    total: int
    identical: int
    first_divergence: int | None = None
    oracle_line: dict[str, Any] | None = None
    servesim_line: dict[str, Any] | None = None
    differing_fields: list[str] = attrs.field(factory=list)
    oracle_steps: int = 0
    servesim_steps: int = 0

    @property
    def percent(self) -> float:
        return 100.0 * self.identical / self.total if self.total else 100.0

    def describe(self) -> str:
        head = (
            f"{self.identical}/{self.total} identical steps ({self.percent:.2f} %); "
            f"oracle {self.oracle_steps} steps, servesim {self.servesim_steps}"
        )
        if self.first_divergence is None:
            return head
        return (
            f"{head}\nfirst divergence at step {self.first_divergence} "
            f"({', '.join(self.differing_fields)}):\n"
            f"  oracle:   {json.dumps(self.oracle_line)}\n"
            f"  servesim: {json.dumps(self.servesim_line)}"
        )


def compare_steps(
    oracle: Sequence[dict[str, Any]],
    servesim: Sequence[dict[str, Any]],
    *,
    fields: Sequence[str] = COMPARED_FIELDS,
    view: Callable[[dict[str, Any]], dict[str, Any]] = normalize,
    shown: Sequence[str] = COMPARED_FIELDS,
) -> Comparison:
    """Step-for-step comparison of ``view``'s ``fields``; a step missing on one side counts as
    a divergence. The first divergence keeps both lines' ``shown`` fields."""
    total = max(len(oracle), len(servesim))
    cmp = Comparison(total=total, identical=0, oracle_steps=len(oracle), servesim_steps=len(servesim))
    for i in range(total):
        o = oracle[i] if i < len(oracle) else None
        s = servesim[i] if i < len(servesim) else None
        if o is not None and s is not None:
            no, ns = view(o), view(s)
            diff = [f for f in fields if no[f] != ns[f]]
        else:
            diff = ["<missing step>"]
        if not diff:
            cmp.identical += 1
        elif cmp.first_divergence is None:
            cmp.first_divergence = i
            cmp.oracle_line, cmp.servesim_line = _show(o, shown), _show(s, shown)
            cmp.differing_fields = diff
    return cmp


def _show(step: dict[str, Any] | None, shown: Sequence[str]) -> dict[str, Any] | None:
    if step is None:
        return None
    return {k: step[k] for k in ("step", *shown) if k in step}


def golden_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "steps.jsonl").is_file())
