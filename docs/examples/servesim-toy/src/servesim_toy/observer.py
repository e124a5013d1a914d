"""A toy observer and command: passes per worker for runs of the toy backend, added to the
report, and ``servesim toy-trace`` writing a sample CSV trace for the ``toy_csv`` format."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

_passes: Counter[int] = Counter()


def run_started(config: Any) -> bool:
    _passes.clear()
    return bool(config.sim.engine.backend == "toy")  # other backends' runs are not watched


def pass_completed(worker_id: int) -> None:
    _passes[worker_id] += 1


def report_extra() -> dict[str, Any]:
    return {"toy_passes_per_worker": [_passes[w] for w in sorted(_passes)]}


def write_trace(args: argparse.Namespace) -> int:
    from servesim.errors import UserError

    if args.requests < 1:
        raise UserError(f"--requests must be >= 1, got {args.requests}")
    rows = [f"{i * args.gap_ms:g},{64 + 16 * (i % 5)},{4 + i % 3}" for i in range(args.requests)]
    try:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write("timestamp_ms,input_length,output_length\n" + "".join(r + "\n" for r in rows))
    except OSError as exc:
        raise UserError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {args.requests} requests to {args.out}")
    return 0
