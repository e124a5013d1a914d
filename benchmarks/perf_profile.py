#!/usr/bin/env python3
"""Where servesim's time goes on one benchmark case: cProfile, summarised as a markdown table.

    python benchmarks/perf_profile.py [--case vllm-1w] [-n N] [--top 15] [--sort cumulative]
                                      [--tree CHECKOUT] [--keep prof.out]

Runs ``python -m cProfile -o PROF -m servesim.cli.main run --trace T --set ... --quiet`` in a child
process with exactly the case's configuration from ``perf_cases`` (so the profile is of the
run the benchmark times), then prints the top functions with their cumulative and own time
as a percentage of the whole profiled run, and their call counts. cProfile itself slows
call-heavy code several-fold, so read the percentages, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_cases import CASES  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402
from run import tree_env  # noqa: E402


def short(func: tuple[str, int, str]) -> str:
    """``package/module.py:line(name)`` with the site/checkout prefix cut off."""
    path, line, name = func
    if path == "~":
        return name
    parts = Path(path).parts
    for anchor in ("servesim", "servesim_vllm", "servesim_sglang", "servesim_trtllm"):
        if anchor in parts:
            path = "/".join(parts[parts.index(anchor):])
            break
    else:
        path = "/".join(parts[-2:])
    return f"{path}:{line}({name})"


#: Start-up frames that wrap the whole run; listing them would only push real entries out.
WRAPPERS = ("<frozen runpy>", "<string>:", "<built-in method builtins.exec>", "servesim/cli/main.py:")


def top_table(prof: str, top: int, sort: str) -> str:
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    rows = []
    for func, (cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        if not short(func).startswith(WRAPPERS):
            rows.append((func, cc, nc, tt, ct))
    key = 4 if sort == "cumulative" else 3
    rows.sort(key=lambda r: r[key], reverse=True)
    out = [f"profiled total {total:.1f} s (sum of own times; start-up wrappers not listed)", "",
           "| # | function | cumulative % | own % | calls |", "|---|---|---|---|---|"]
    for i, (func, cc, nc, tt, ct) in enumerate(rows[:top], 1):
        calls = f"{nc:,}" if nc == cc else f"{nc:,}/{cc:,}"
        out.append(f"| {i} | `{short(func)}` | {100 * ct / total:.1f}% | {100 * tt / total:.1f}% | {calls} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="vllm-1w", choices=[c.name for c in CASES])
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--sort", choices=("cumulative", "tottime"), default="cumulative")
    ap.add_argument("--tree", default=None, help="profile this checkout instead of the installed packages")
    ap.add_argument("--trace-dir", default=os.path.join(tempfile.gettempdir(), "servesim-bench-traces"))
    ap.add_argument("--keep", default=None, help="keep the raw profile at this path")
    args = ap.parse_args(argv)
    case = next(c for c in CASES if c.name == args.case)
    if args.requests is not None:
        case = case.sized(args.requests)
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    with tempfile.TemporaryDirectory() as tmp:
        prof = args.keep or str(Path(tmp) / "prof.out")
        sets = [arg for s in case.servesim_sets() for arg in ("--set", s)]
        cmd = [sys.executable, "-m", "cProfile", "-o", prof, "-m", "servesim.cli.main", "run",
               "--trace", str(trace), *sets, "--quiet"]
        done = subprocess.run(cmd, env=tree_env(args.tree), check=False)
        if done.returncode != 0:
            print(f"profiled run failed with exit {done.returncode}", file=sys.stderr)
            return 1
        print(f"# {case.name}, {case.n:,} requests, sorted by {args.sort}")
        print(top_table(prof, args.top, args.sort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
