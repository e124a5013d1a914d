#!/usr/bin/env python3
"""Peak memory of replaying a long trace: peak RSS, bytes per request and wall time.

    python benchmarks/trace_memory.py [-n 1000000] [--rate 8] [--python PY] [--tree CHECKOUT]

Writes (once, into ``--trace-dir``) an ``N``-request Mooncake trace of the benchmark family
(``benchmarks/perf_trace.py``: Poisson arrivals at ``--rate`` req/s, input 1,024-4,096 tokens,
output 128-512, one fresh hash id per 512-token block), replays it with the default engine
(one vLLM worker, aggregated, no sinks) in a child process, and prints the child's peak RSS
(``os.wait4``), that divided by the request count, its RSS once the trace is loaded, and the
wall time. Progress (requests finished, simulated time, RSS) goes to stderr as the replay goes.
``--python`` runs the child under another interpreter (another installation to compare);
``--tree`` makes a checkout's packages shadow the installed ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_trace import TraceSpec, ensure_trace  # noqa: E402
from run import tree_env  # noqa: E402

CHILD = r"""
import json, sys, time
from servesim.config.loader import load_config
from servesim.replay import runner

def rss_mib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

trace, every = sys.argv[1], float(sys.argv[2])
loaded = load_config(None, ["workload.synthetic=null", "workload.trace.path=" + json.dumps(trace)])
started = time.monotonic()
loaded_at = {}
read = runner.load_workload
def load_workload(*args, **kwargs):
    workload = read(*args, **kwargs)
    loaded_at["rss"], loaded_at["s"] = rss_mib(), time.monotonic() - started
    print(f"trace loaded: {loaded_at['rss']:,.0f} MiB RSS after {loaded_at['s']:.1f} s",
          file=sys.stderr, flush=True)
    return workload
runner.load_workload = load_workload
next_at = [0.0]
def progress(done, total, now):
    if done >= next_at[0] or done == total:
        next_at[0] = done + every * total
        print(f"{done:,}/{total:,} finished, simulated {now / 1000:,.0f} s, "
              f"{rss_mib():,.0f} MiB RSS, {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)
result = runner.simulate(loaded, progress=progress)
print(json.dumps({"completed": result.report["completed"],
                  "num_requests": result.report["num_requests"],
                  "wall_s": time.monotonic() - started, "loaded_rss_mib": loaded_at.get("rss"),
                  "load_s": loaded_at.get("s")}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=8.0, help="arrivals per second (default 8)")
    ap.add_argument("--python", default=sys.executable, help="the child's interpreter")
    ap.add_argument("--tree", default=None, help="measure this checkout instead of the installed packages")
    ap.add_argument("--trace-dir", default=os.path.join(tempfile.gettempdir(), "servesim-bench-traces"))
    ap.add_argument("--every", type=float, default=0.05, help="progress step, a fraction of N")
    args = ap.parse_args(argv)
    spec = TraceSpec(n=args.requests, rate=args.rate)
    path = Path(args.trace_dir) / spec.file_name
    if not path.exists():
        print(f"writing {path} ({spec.make_trace_args()})", file=sys.stderr, flush=True)
    began = time.monotonic()
    trace = ensure_trace(spec, Path(args.trace_dir))
    if time.monotonic() - began > 1:
        print(f"trace written in {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
    cmd = [args.python, "-c", CHILD, str(trace), str(args.every)]
    started = time.monotonic()
    child = subprocess.Popen(cmd, env=tree_env(args.tree), stdout=subprocess.PIPE, cwd=tempfile.gettempdir())
    assert child.stdout is not None
    out = child.stdout.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if child.returncode != 0:
        print(f"the replay failed (exit {child.returncode})", file=sys.stderr)
        return 1
    data = json.loads(out.decode().strip().splitlines()[-1])
    peak = usage.ru_maxrss * 1024  # Linux reports KiB
    n = data["num_requests"]
    print(f"requests: {n:,} ({data['completed']:,} completed)")
    print(f"peak RSS: {peak / (1 << 20):,.0f} MiB, {peak / n:,.0f} bytes a request")
    if data["loaded_rss_mib"] is not None:
        print(f"RSS with the trace loaded: {data['loaded_rss_mib']:,.0f} MiB "
              f"(after {data['load_s']:.1f} s)")
    print(f"wall time: {data['wall_s']:.1f} s replay, {wall:.1f} s process; "
          f"CPU {usage.ru_utime + usage.ru_stime:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
