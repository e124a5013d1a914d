#!/usr/bin/env python3
"""Speed and memory of servesim beside the reference (Dynamo's compiled mocker), issue 8.

    python benchmarks/run.py [--cases vllm-1w,vllm-4w-kv] [--quick] [--no-peer]
                             [--repeat K] [--out results.json]

For every case it writes a seeded trace (``perf_trace``: ``make_trace.py``'s records, built
in), replays it with servesim and, when the reference is installed, with
``peer_dynamo.py``, each run in its own child process, and prints one markdown table row:
requests per wall second for both and their ratio (measured in the same run, back to back),
each side's peak RSS, and the relative difference of servesim's mean and p99 TTFT, TPOT and
E2E from the reference's. Both sides time only the replay call (trace reading, cluster
construction, simulation), not interpreter start-up. servesim's packages are compiled to
bytecode first (``perf_bytecode``), as an installed copy is. ``docs/performance.md`` explains the
cases, the configuration mapping and the latest results.

The reference is looked for at ``--peer-script`` (default ``$SERVESIM_PEER_SCRIPT``, else
``../shared/tools/peer_dynamo.py`` beside the repository) run by ``--peer-python`` (default
``$PEER_DYNAMO_PYTHON``, else ``~/.cache/servesim-peer/bin/python``); when either is missing
the peer columns are left empty. Nothing here is needed by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_bytecode import ensure_bytecode  # noqa: E402
from perf_cases import CASES, Case, config_mismatches, select_cases  # noqa: E402
from perf_measure import Measured, run_measured  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CHILD = HERE / "perf_child.py"
METRICS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E", "e2el"))
PEER_METRIC = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms"}
SPEED_TARGET = 0.5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=None,
                    help="comma-separated case names (default: all): " + ", ".join(c.name for c in CASES))
    ap.add_argument("--quick", action="store_true", help="1,000-request versions of the cases")
    ap.add_argument("-n", "--requests", type=int, default=None, help="override every case's request count")
    ap.add_argument("--no-peer", action="store_true", help="run servesim only")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each side K times, alternating; report the fastest wall and largest RSS")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run")
    ap.add_argument("--trace-dir", default=os.path.join(tempfile.gettempdir(), "servesim-bench-traces"),
                    help="where generated traces are cached")
    ap.add_argument("--peer-script", default=os.environ.get("SERVESIM_PEER_SCRIPT")
                    or str(REPO.parent / "shared" / "tools" / "peer_dynamo.py"))
    ap.add_argument("--peer-python", default=os.environ.get("PEER_DYNAMO_PYTHON")
                    or os.path.expanduser("~/.cache/servesim-peer/bin/python"))
    ap.add_argument("--tree", default=None,
                    help="run servesim from this checkout (e.g. a `git archive` of a commit) instead of "
                    "the installed packages")
    ap.add_argument("--compiled-python", default=os.environ.get("SERVESIM_COMPILED_PYTHON"),
                    help="also run servesim with this interpreter, whose environment holds the "
                    "compiled build (SERVESIM_COMPILE=1 pip install ...); interleaved with the "
                    "other runs (default: $SERVESIM_COMPILED_PYTHON)")
    ap.add_argument("--out", default=None, help="write every measurement as JSON here")
    return ap.parse_args(argv)


def tree_env(tree: str | None) -> dict[str, str] | None:
    """The child's environment: with ``tree``, that checkout's packages shadow the installed ones.

    Lets a run measure a clean ``git archive`` of a commit while other work is in progress
    in the installed (editable) working tree, or compare two commits side by side.
    """
    if tree is None:
        return None
    root = Path(tree).resolve()
    paths = [root / "core" / "src", *sorted((root / "plugins").glob("*/src"))]
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), *([old] if old else [])])}


def run_servesim(case: Case, trace: Path, timeout: float, env: dict[str, str] | None,
                 python: str = sys.executable) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        m = run_measured([python, str(CHILD), str(out), str(trace), *case.servesim_sets()],
                         timeout, env)
        if m.returncode != 0 or not out.exists():
            return _failed(m)
        data = json.loads(out.read_text())
    report = data["report"]
    stats = {f"{s}_{k}": report.get(f"{s}_{k}_ms") for _, k in METRICS for s in ("mean", "p99")}
    return {"wall_s": data["wall_s"], "rps": case.n / data["wall_s"], "process_wall_s": m.process_wall_s,
            "peak_rss_mib": m.peak_rss_mib, "completed": report.get("completed"),
            "passes": data["passes"], "source": data["source"], "stats": stats, "report": report}


def run_peer(case: Case, trace: Path, timeout: float, python: str, script: str) -> dict[str, Any]:
    sets = [arg for s in case.peer_sets() for arg in ("--set", s)]
    env = {**os.environ, "PEER_DYNAMO_PYTHON": python}
    m = run_measured([python, script, str(trace), *sets], timeout, env)
    if m.returncode != 0:
        return _failed(m)
    try:
        data = json.loads(m.stdout)
        stats = {f"{s}_{k}": data[PEER_METRIC[k]][s] for _, k in METRICS for s in ("mean", "p99")}
    except (ValueError, KeyError, TypeError) as exc:
        return {**_failed(m), "error": f"unreadable reference output ({exc!r})"}
    return {"wall_s": data["wall_clock_s"], "rps": case.n / data["wall_clock_s"],
            "process_wall_s": m.process_wall_s, "peak_rss_mib": m.peak_rss_mib,
            "completed": data.get("completed_requests"), "stats": stats, "report": data}


def _failed(m: Measured) -> dict[str, Any]:
    why = "timed out" if m.timed_out else f"exit {m.returncode}"
    tail = m.stderr.strip().splitlines()[-3:]
    return {"error": why + (": " + " | ".join(tail) if tail else ""),
            "process_wall_s": m.process_wall_s, "peak_rss_mib": m.peak_rss_mib}


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest successful run, carrying the largest RSS seen and every wall time."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    best = dict(min(ok, key=lambda r: r["wall_s"]))
    best["peak_rss_mib"] = max(r["peak_rss_mib"] for r in ok)
    best["all_wall_s"] = [r["wall_s"] for r in ok]
    return best


def measure_case(case: Case, args: argparse.Namespace, peer_ok: bool) -> dict[str, Any]:
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    mine: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    compiled: list[dict[str, Any]] = []
    for _ in range(max(1, args.repeat)):
        mine.append(run_servesim(case, trace, args.timeout, tree_env(args.tree)))
        if args.compiled_python:
            compiled.append(run_servesim(case, trace, args.timeout, None, args.compiled_python))
        if peer_ok:
            theirs.append(run_peer(case, trace, args.timeout, args.peer_python, args.peer_script))
    row: dict[str, Any] = {"case": case.name, "n": case.n, "rate": case.rate, "backend": case.backend,
                           "workers": case.workers, "router": case.router,
                           "num_gpu_blocks": case.num_gpu_blocks, "block_size": case.block_size,
                           "targets": list(case.targets), "trace": str(trace),
                           "servesim_sets": case.servesim_sets(), "servesim": best_of(mine)}
    if compiled:
        row["compiled"] = best_of(compiled)
    if peer_ok:
        row["peer_sets"] = case.peer_sets()
        row["peer"] = best_of(theirs)
        compare(case, row)
        row["round_ratios"] = round_ratios(mine, theirs)
        if compiled:
            row["compiled_round_ratios"] = round_ratios(compiled, theirs)
    return row


def round_ratios(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[float]:
    """servesim's speed over the reference's in each round (the two runs back to back), for
    the rounds where both succeeded: less exposed to the machine's drift over a run than the
    ratio of the two fastest runs, which may come from different rounds."""
    return [b["wall_s"] / a["wall_s"] for a, b in zip(mine, theirs, strict=True)
            if "error" not in a and "error" not in b]


def compare(case: Case, row: dict[str, Any]) -> None:
    """Fill in the ratio, relative differences, config check and target verdicts."""
    mine, theirs = row["servesim"], row["peer"]
    if "error" in mine or "error" in theirs:
        return
    row["ratio"] = mine["rps"] / theirs["rps"]
    row["process_ratio"] = theirs["process_wall_s"] / mine["process_wall_s"]
    fast = row.get("compiled")
    if fast is not None and "error" not in fast:
        row["compiled_ratio"] = fast["rps"] / theirs["rps"]
        row["compiled_process_ratio"] = theirs["process_wall_s"] / fast["process_wall_s"]
    row["rel_diff"] = {k: _rel(mine["stats"][k], theirs["stats"][k]) for k in mine["stats"]}
    row["config_mismatches"] = config_mismatches(case, mine["report"], theirs["report"])
    if mine["completed"] != theirs["completed"]:
        row["config_mismatches"].append(f"completed: {mine['completed']} != {theirs['completed']}")
    if fast is not None and "error" not in fast and fast["report"] != mine["report"]:
        row["config_mismatches"].append("the compiled build's report differs from the interpreted one")
    misses = []
    if "speed" in case.targets and row["ratio"] < SPEED_TARGET:
        misses.append(f"speed {row['ratio']:.2f}x < {SPEED_TARGET}x")
    if "memory" in case.targets and mine["peak_rss_mib"] > theirs["peak_rss_mib"]:
        misses.append(f"memory {mine['peak_rss_mib']:.0f} MiB > {theirs['peak_rss_mib']:.0f} MiB")
    row["below_target"] = misses


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else None
    return (a - b) / b


HEADER = ("| case | requests | rate (req/s) | servesim req/s | reference req/s | ratio | "
          "process ratio | compiled req/s | compiled ratio | compiled process ratio | "
          "servesim RSS (MiB) | reference RSS (MiB) | TTFT Δ mean / p99 | TPOT Δ mean / p99 | "
          "E2E Δ mean / p99 |")


def table_header() -> str:
    return HEADER + "\n" + "|" + "---|" * HEADER.count(" | ") + "---|"


def table_row(row: dict[str, Any]) -> str:
    mine, theirs = row["servesim"], row.get("peer")

    def side(d: dict[str, Any] | None, key: str, fmt: str) -> str:
        if d is None:
            return "–"
        if "error" in d:
            return "error" if key == "rps" else format(d.get(key, 0.0), fmt)
        return format(d[key], fmt)

    def ratio(key: str) -> str:
        return f"{row[key]:.2f}x" if key in row else "–"

    cells = [row["case"], f"{row['n']:,}", f"{row['rate']:g}", side(mine, "rps", ",.0f"),
             side(theirs, "rps", ",.0f"), ratio("ratio"), ratio("process_ratio"),
             side(row.get("compiled"), "rps", ",.0f"), ratio("compiled_ratio"),
             ratio("compiled_process_ratio"),
             side(mine, "peak_rss_mib", ",.0f"), side(theirs, "peak_rss_mib", ",.0f")]
    rel = row.get("rel_diff")
    for _, k in METRICS:
        cells.append(f"{_pct(rel.get(f'mean_{k}'))} / {_pct(rel.get(f'p99_{k}'))}" if rel else "–")
    return "| " + " | ".join(cells) + " |"


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "0.00%" if abs(x) < 5e-5 else f"{x * 100:+.2f}%"


def environment() -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            done = subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, check=False)
            return done.stdout.strip()
        except OSError:
            return ""
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cases = select_cases(args.cases.split(",") if args.cases else None, args.quick, args.requests)
    except KeyError as exc:
        print(f"run.py: unknown case(s): {exc.args[0]}", file=sys.stderr)
        return 2
    peer_ok = not args.no_peer and os.path.exists(args.peer_script) and os.path.exists(args.peer_python)
    if not args.no_peer and not peer_ok:
        print(f"reference not found ({args.peer_script} / {args.peer_python}); servesim only",
              file=sys.stderr)
    env = environment()
    if args.tree:
        # The working tree's commit says nothing about a separate checkout; a COMMIT file
        # written beside a `git archive` export does.
        marker = Path(args.tree) / "COMMIT"
        env["tree"] = str(Path(args.tree).resolve())
        env["commit"] = marker.read_text().strip() if marker.exists() else None
        env["dirty"] = False
    where = f"tree {env['tree']} (commit {env['commit']})" if args.tree else (
        f"commit {env['commit']}{' (dirty tree)' if env['dirty'] else ''}")
    print(f"# {env['date']}  {where}  "
          f"python {env['python']}  {env['cpus']} CPUs  load {env['loadavg_start'][0]:.1f}", flush=True)
    # Both servesim sides run from compiled bytecode, as an installed copy does.
    env["bytecode"] = [ensure_bytecode(sys.executable, tree_env(args.tree))]
    if args.compiled_python:
        env["bytecode"].append(ensure_bytecode(args.compiled_python))
    for line in env["bytecode"]:
        print(f"# {line}", flush=True)
    print(table_header(), flush=True)
    rows = []
    for case in cases:
        row = measure_case(case, args, peer_ok)
        rows.append(row)
        print(table_row(row), flush=True)
    env["loadavg_end"] = os.getloadavg()
    notes = _notes(rows)
    for line in notes:
        print(line)
    if args.out:
        payload = {"environment": env, "rows": rows}
        Path(args.out).write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return 0


def _notes(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for row in rows:
        for side in ("servesim", "compiled", "peer"):
            if side in row and "error" in row[side]:
                out.append(f"- {row['case']}: {side} failed: {row[side]['error']}")
        for m in row.get("config_mismatches", []):
            out.append(f"- {row['case']}: configurations differ: {m}")
        for key, label in (("round_ratios", "ratio"), ("compiled_round_ratios", "compiled ratio")):
            got = row.get(key) or []
            if len(got) > 1:
                out.append(f"- {row['case']}: {label} by round " + ", ".join(f"{r:.2f}x" for r in got)
                           + f" (median {median(got):.2f}x)")
        for miss in row.get("below_target", []):
            out.append(f"- {row['case']}: BELOW TARGET: {miss}")
    return out


if __name__ == "__main__":
    sys.exit(main())
