#!/usr/bin/env python3
"""The cost of each sink on one replay (issue 16; target from issue 21).

    python benchmarks/bench_sinks.py [--case vllm-4w-kv] [-n 10000] [--repeat 3]
                                     [--sinks none,jsonl-kv,jsonl-fpm,jsonl-both,...]

Every configuration replays the same seeded trace in its own child process
(``perf_child.py``, which times :func:`servesim.replay.runner.simulate` only) and prints one
markdown row: CPU seconds of the replay (fastest of ``--repeat``; CPU rather than wall time, so
that other load on the machine counts less), passes, and the ratio to the run without sinks.
Each round runs every configuration once, so below the table each configuration's ratio to
``none`` is also given round by round, with the median: on a machine whose speed drifts, the
ratio within a round is the steadier figure.
The target is ``jsonl-both`` at most 1.6x ``none`` on ``vllm-4w-kv``. Sinks write under
a temporary folder; ``zmq-*`` publish to 127.0.0.1 with no subscriber and need servesim-zmq,
``prometheus`` needs servesim-prometheus.
``jsonl-both-unformatted`` replays ``jsonl-both`` with the line formatters replaced by ones
that write nothing (``perf_unformatted.py``): what it adds to ``none`` is producing, merging
and writing the events; what ``jsonl-both`` adds to it is formatting their text.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_bytecode import ensure_bytecode  # noqa: E402
from perf_cases import select_cases  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402
from perf_unformatted import ENV as UNFORMATTED_ENV  # noqa: E402

HERE = Path(__file__).resolve().parent
CHILD = HERE / "perf_child.py"


def sink_sets(name: str, out: Path) -> list[str]:
    """``--set`` overrides that add the sinks of configuration ``name``."""
    kv = f'sinks.kv_events=[{{type: jsonl, path: "{out}/kv.jsonl"}}]'
    fpm = f'sinks.fpm=[{{type: jsonl, path: "{out}/fpm.jsonl"}}]'
    table = {
        "none": [],
        "memory-kv": ["sinks.kv_events=[{type: memory}]"],
        "jsonl-kv": [kv],
        "jsonl-fpm": [fpm],
        "jsonl-both": [kv, fpm],
        "jsonl-both-unformatted": [kv, fpm],
        "zmq-kv": ['sinks.kv_events=[{type: zmq, endpoint: "tcp://127.0.0.1:45557"}]'],
        "zmq-fpm": ['sinks.fpm=[{type: zmq, endpoint: "tcp://127.0.0.1:45380"}]'],
        "prometheus": [f'sinks.fpm=[{{type: prometheus, path: "{out}/metrics.om"}}]'],
    }
    return table[name]


#: Configurations replayed with the JSONL line formatters replaced (``perf_unformatted``).
UNFORMATTED = frozenset({"jsonl-both-unformatted"})


def run_once(trace: Path, sets: list[str], out_dir: Path, unformatted: bool = False,
             timeout: float | None = None) -> dict:
    out = out_dir / "child.json"
    env = dict(os.environ)
    env.pop(UNFORMATTED_ENV, None)
    if unformatted:
        env[UNFORMATTED_ENV] = "1"
    proc = subprocess.run([sys.executable, str(CHILD), str(out), str(trace), *sets],
                          capture_output=True, text=True, check=False, env=env, timeout=timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    if unformatted and any(p.stat().st_size for p in out_dir.glob("*.jsonl")):
        return {"error": "the line formatters were not replaced (servesim.sinks_builtin compiled?)"}
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="vllm-4w-kv")
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sinks", default="none,jsonl-kv,jsonl-fpm,jsonl-both")
    ap.add_argument("--trace-dir", default=str(Path(tempfile.gettempdir()) / "servesim-bench-traces"))
    args = ap.parse_args(argv)
    (case,) = select_cases([args.case], False, args.requests)
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    print(f"# {ensure_bytecode()}", file=sys.stderr)  # timed as an installed copy runs
    names = args.sinks.split(",")
    best: dict[str, float] = {}
    passes: dict[str, int] = {}
    errors: dict[str, str] = {}
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):  # interleaved, so machine load hits every row alike
            got: dict[str, float] = {}
            for name in names:
                res = run_once(trace, [*case.servesim_sets(), *sink_sets(name, Path(tmp))], Path(tmp),
                               unformatted=name in UNFORMATTED)
                if "error" in res:
                    errors[name] = res["error"]
                    continue
                got[name] = res["cpu_s"]
                best[name] = min(best.get(name, float("inf")), res["cpu_s"])
                passes[name] = res["passes"]
            rounds.append(got)
    base = best.get("none")
    print(f"case {case.name}, {case.n} requests, fastest of {args.repeat}\n")
    print("| sinks | CPU s | passes | x none |\n|---|---:|---:|---:|")
    for name in names:
        if name in errors and name not in best:
            print(f"| {name} | error: {errors[name]} | | |")
            continue
        ratio = f"{best[name] / base:.2f}" if base else ""
        print(f"| {name} | {best[name]:.2f} | {passes[name]} | {ratio} |")
    print()
    for line in round_lines(names, rounds):
        print(line)
    return 0


def round_lines(names: list[str], rounds: list[dict[str, float]]) -> list[str]:
    """Per configuration other than ``none``: its ratio to ``none`` in each round that ran
    both, and their median."""
    out = []
    for name in names:
        if name == "none":
            continue
        got = [r[name] / r["none"] for r in rounds if name in r and r.get("none")]
        if got:
            out.append(f"- {name}: x none by round " + ", ".join(f"{x:.2f}" for x in got)
                       + f" (median {median(got):.2f})")
    return out


if __name__ == "__main__":
    sys.exit(main())
