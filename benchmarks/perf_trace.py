"""Seeded Mooncake JSONL traces for the speed benchmark, without needing ``/work/shared``.

The records are the ones ``make_trace.py -n N --rate R --isl uniform:LO:HI --osl uniform:LO:HI
--seed S --block-size B`` writes (Poisson arrivals, no shared-prefix groups), byte for byte:
the same two ``random.Random`` streams (``"{seed}:arrivals"`` and ``"{seed}:lengths"``), the
same draw order (input length, then output length), integer-millisecond timestamps and one
fresh hash id per ``B``-token block counting up from 0. So a trace made here can be
regenerated with the shared tool, and a reader can check a result against either.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from attrs import frozen


@frozen
class TraceSpec:
    """One benchmark trace: ``n`` Poisson arrivals at ``rate`` req/s, uniform lengths."""

    n: int
    rate: float
    isl: tuple[int, int] = (1024, 4096)
    osl: tuple[int, int] = (128, 512)
    seed: int = 1
    block_size: int = 512

    @property
    def file_name(self) -> str:
        rate = f"{self.rate:g}".replace(".", "p")
        return (f"poisson_n{self.n}_r{rate}_isl{self.isl[0]}-{self.isl[1]}"
                f"_osl{self.osl[0]}-{self.osl[1]}_b{self.block_size}_s{self.seed}.jsonl")

    def make_trace_args(self) -> str:
        """The equivalent ``make_trace.py`` command-line arguments (for the docs)."""
        return (f"-n {self.n} --rate {self.rate:g} --isl uniform:{self.isl[0]}:{self.isl[1]} "
                f"--osl uniform:{self.osl[0]}:{self.osl[1]} --block-size {self.block_size} "
                f"--seed {self.seed}")


def records(spec: TraceSpec) -> Iterator[dict[str, Any]]:
    """The trace's records in arrival order (a pure function of ``spec``)."""
    arrivals = random.Random(f"{spec.seed}:arrivals")
    lengths = random.Random(f"{spec.seed}:lengths")
    t = 0.0
    next_id = 0
    for i in range(spec.n):
        if i > 0:
            t += arrivals.expovariate(spec.rate) * 1000.0
        isl = max(1, lengths.randint(*spec.isl))
        osl = max(1, lengths.randint(*spec.osl))
        blocks = -(-isl // spec.block_size)
        yield {"timestamp": int(round(t)), "input_length": isl, "output_length": osl,
               "hash_ids": list(range(next_id, next_id + blocks))}
        next_id += blocks


def ensure_trace(spec: TraceSpec, directory: Path) -> Path:
    """Write the trace under ``directory`` unless it is already there; return its path.

    Written to a temporary name first so an interrupted run never leaves a short trace behind.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / spec.file_name
    if path.exists():
        return path
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records(spec):
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path
