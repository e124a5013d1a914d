#!/usr/bin/env python3
"""Per-request agreement with the reference on one benchmark case: where do the two part ways?

    python benchmarks/perf_requests.py [--case vllm-1w] [-n N] [--tol-ms 0.001] [--tree CHECKOUT]

Replays the case with ``servesim run --per-request`` and with ``peer_dynamo.py
--set report_jsonl_path=...``, matches requests by ``(arrival, input length, output length)``
(the reference identifies requests by arrival time only, and integer-millisecond timestamps
can collide), and prints the largest first-token and completion differences plus the
earliest simulated moment at which any request differs by more than ``--tol-ms``. The
reference writes whole nanoseconds and servesim's per-request file rounds to 1e-6 ms, so
differences below about 1e-5 ms are representation noise. Needs the reference (see
``run.py``); the servesim per-request file holds every token time, so 100,000 requests take
about half a gigabyte of temporary disk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_cases import CASES  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402
from run import REPO, tree_env  # noqa: E402

Key = tuple[float, int, int]


def load_peer(path: Path) -> dict[Key, list[dict[str, Any]]]:
    out: dict[Key, list[dict[str, Any]]] = {}
    with path.open() as fh:
        for line in fh:
            d = json.loads(line)
            key = (round(d["arrival_time_ms"], 3), d["input_length"], d["output_length"])
            out.setdefault(key, []).append(d)
    return out


def compare(mine: Path, peer: dict[Key, list[dict[str, Any]]], tol: float) -> dict[str, Any]:
    worst_first = worst_done = 0.0
    earliest: tuple[float, int, str, float] | None = None
    differing = unmatched = 0
    with mine.open() as fh:
        for line in fh:
            d = json.loads(line)
            key = (round(d["arrival_ms"], 3), d["input_length"], d["num_output_tokens"])
            if not peer.get(key):
                unmatched += 1
                continue
            p = peer[key].pop(0)
            pairs = (("first token", d["first_token_ms"], p["first_token_ms"]),
                     ("completion", d["completion_ms"], p["terminal_time_ms"]))
            bad = False
            for what, a, b in pairs:
                if a is None or b is None:
                    continue
                diff = a - b
                if what == "first token":
                    worst_first = max(worst_first, abs(diff))
                else:
                    worst_done = max(worst_done, abs(diff))
                if abs(diff) > tol:
                    bad = True
                    at = min(a, b)
                    if earliest is None or at < earliest[0]:
                        earliest = (at, d["request_id"], what, diff)
            differing += bad
    return {"max_first_token_diff_ms": worst_first, "max_completion_diff_ms": worst_done,
            "requests_differing": differing, "unmatched": unmatched, "earliest": earliest}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="vllm-1w", choices=[c.name for c in CASES])
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--tol-ms", type=float, default=1e-3)
    ap.add_argument("--tree", default=None, help="run servesim from this checkout")
    ap.add_argument("--trace-dir", default=os.path.join(tempfile.gettempdir(), "servesim-bench-traces"))
    ap.add_argument("--peer-script", default=os.environ.get("SERVESIM_PEER_SCRIPT")
                    or str(REPO.parent / "shared" / "tools" / "peer_dynamo.py"))
    ap.add_argument("--peer-python", default=os.environ.get("PEER_DYNAMO_PYTHON")
                    or os.path.expanduser("~/.cache/servesim-peer/bin/python"))
    args = ap.parse_args(argv)
    if not (os.path.exists(args.peer_script) and os.path.exists(args.peer_python)):
        print("the reference is not installed; nothing to compare", file=sys.stderr)
        return 2
    case = next(c for c in CASES if c.name == args.case)
    if args.requests is not None:
        case = case.sized(args.requests)
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    with tempfile.TemporaryDirectory() as tmp:
        mine, theirs = Path(tmp) / "servesim.jsonl", Path(tmp) / "peer.jsonl"
        sets = [a for s in case.servesim_sets() for a in ("--set", s)]
        subprocess.run([sys.executable, "-m", "servesim.cli.main", "run", "--trace", str(trace), *sets,
                        "--per-request", str(mine), "--quiet"], env=tree_env(args.tree), check=True)
        psets = [a for s in case.peer_sets() for a in ("--set", s)]
        subprocess.run([args.peer_python, args.peer_script, str(trace), *psets,
                        "--set", f"report_jsonl_path={json.dumps(str(theirs))}"],
                       stdout=subprocess.DEVNULL, check=True)
        result = compare(mine, load_peer(theirs), args.tol_ms)
    print(f"# {case.name}, {case.n:,} requests")
    for k, v in result.items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
