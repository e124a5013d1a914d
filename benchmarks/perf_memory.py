#!/usr/bin/env python3
"""What servesim's memory holds at the end of one benchmark case, by allocating source line.

    python benchmarks/perf_memory.py [--case vllm-1w] [-n N] [--top 12] [--tree CHECKOUT]

Runs the case's replay in a child under :mod:`tracemalloc` (25 frames, so an allocation is
charged to the servesim line that made it, not only to a library helper) and prints the live
allocations when the last request finished (from the replay's final progress call, before
the replayer and its workload are released) grouped by line, plus tracemalloc's own peak.
tracemalloc slows the run several-fold; the sizes, not the time, are the point.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_cases import CASES  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402
from run import tree_env  # noqa: E402

CHILD = r"""
import json, sys, tracemalloc
tracemalloc.start(25)
from servesim.config.loader import load_config
from servesim.replay.runner import simulate
trace, top, *sets = sys.argv[1:]
loaded = load_config(None, [*sets, "workload.trace.path=" + json.dumps(trace)])
base = tracemalloc.get_traced_memory()[0]
taken = []
def progress(done, total, now):
    # the replayer's last progress call: every request finished, nothing freed yet
    if done == total and not taken:
        taken.append((tracemalloc.take_snapshot(), tracemalloc.get_traced_memory()))
result = simulate(loaded, progress=progress)
snap, (cur, peak) = taken[0]
def where(tb):
    # the innermost frame inside servesim code, else the innermost frame
    for fr in reversed(tb):
        if "servesim" in fr.filename:
            return f"{fr.filename}:{fr.lineno}"
    return f"{tb[-1].filename}:{tb[-1].lineno}"
by = {}
for stat in snap.statistics("traceback"):
    k = where(stat.traceback)
    by[k] = by.get(k, 0) + stat.size
rows = sorted(by.items(), key=lambda kv: -kv[1])[: int(top)]
print(json.dumps({"base": base, "current": cur, "peak": peak, "rows": rows}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="vllm-1w", choices=[c.name for c in CASES])
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--tree", default=None, help="measure this checkout instead of the installed packages")
    ap.add_argument("--trace-dir", default=os.path.join(tempfile.gettempdir(), "servesim-bench-traces"))
    args = ap.parse_args(argv)
    case = next(c for c in CASES if c.name == args.case)
    if args.requests is not None:
        case = case.sized(args.requests)
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    cmd = [sys.executable, "-c", CHILD, str(trace), str(args.top), *case.servesim_sets()]
    done = subprocess.run(cmd, env=tree_env(args.tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    data = json.loads(done.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(f"# {case.name}, {case.n:,} requests: traced memory after setup "
          f"{data['base'] / mib:.1f} MiB, at the end {data['current'] / mib:.1f} MiB, "
          f"peak {data['peak'] / mib:.1f} MiB")
    print("\n| allocated at | live MiB at the end |\n|---|---|")
    for where, size in data["rows"]:
        print(f"| `{_short(where)}` | {size / mib:.1f} |")
    return 0


def _short(where: str) -> str:
    parts = Path(where).parts
    for anchor in ("servesim", "servesim_vllm", "servesim_sglang", "servesim_trtllm"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return "/".join(parts[-2:])


if __name__ == "__main__":
    sys.exit(main())
