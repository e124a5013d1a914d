#!/usr/bin/env python3
"""The cost of each sink on one replay (issue 16; target from issue 21).

    python benchmarks/bench_sinks.py [--case vllm-4w-kv] [-n 10000] [--repeat 3]
                                     [--sinks none,jsonl-kv,jsonl-fpm,jsonl-both,...]
                                     [--against CHECKOUT]

Every configuration replays the same seeded trace in its own child process
(``perf_child.py``, which times :func:`servesim.replay.runner.simulate` only) and prints one
markdown row: CPU seconds of the replay (fastest of ``--repeat``; CPU rather than wall time, so
that other load on the machine counts less), passes, and the ratio to the run without sinks.
Each round runs every configuration once, so below the table each configuration's ratio to
``none`` is also given round by round, with the median: on a machine whose speed drifts, the
ratio within a round is the steadier figure.
The target is ``jsonl-both`` at most 1.6x ``none`` on ``vllm-4w-kv``. ``jsonl-both`` runs as
configured by default (``sinks.writer: auto``: at 10,000 requests on two CPUs, its lines are
ordered, made and written in a writer process), ``jsonl-both-inline`` in the replaying process;
the table gives the replaying process's CPU time and the replay's wall time, each with its
ratio to ``none``, and the writer process's CPU time (which the first leaves out). Sinks write under
a temporary folder; ``zmq-*`` publish to 127.0.0.1 with no subscriber and need servesim-zmq,
``prometheus`` needs servesim-prometheus.
``jsonl-both-unformatted`` replays ``jsonl-both-inline`` with the line formatters replaced by
ones that write nothing (``perf_unformatted.py``): what it adds to ``none`` is producing,
merging and writing the events; what ``jsonl-both-inline`` adds to it is formatting their text.
``--against CHECKOUT`` also replays every configuration from another checkout (a ``git
archive`` of another commit, say; its packages shadow the installed ones as ``run.py
--tree`` does) in the same rounds, the two trees' order swapped every round, and prints its
table and each configuration's difference to it round by round. On a machine whose speed
drifts by more than a change saves, that paired difference is the figure to read.
``--instructions`` replays every configuration once under valgrind's callgrind instead
(``perf_instructions.py``; valgrind must be on ``PATH``) and prints the instructions of each
replay and their ratio to ``none``: figures that do not drift, but leave out cache misses
and branch predictions, so the ratio of counts is a floor under the ratio of times. A
10,000-request replay takes about four minutes under valgrind. Only the replaying process
is counted: a writer process (``jsonl-both`` at 10,000 requests) runs outside the count.
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
from perf_cases import Case, select_cases  # noqa: E402
from perf_instructions import CountError, replay_count, valgrind  # noqa: E402
from perf_trace import ensure_trace  # noqa: E402
from perf_unformatted import ENV as UNFORMATTED_ENV  # noqa: E402
from run import tree_env  # noqa: E402

HERE = Path(__file__).resolve().parent
CHILD = HERE / "perf_child.py"


def sink_sets(name: str, out: Path) -> list[str]:
    """``--set`` overrides that add the sinks of configuration ``name``."""
    return sink_table(out)[name]


def sink_table(out: Path) -> dict[str, list[str]]:
    """Every configuration's ``--set`` overrides, its sinks writing under ``out``."""
    kv = f'sinks.kv_events=[{{type: jsonl, path: "{out}/kv.jsonl"}}]'
    fpm = f'sinks.fpm=[{{type: jsonl, path: "{out}/fpm.jsonl"}}]'
    inline = "sinks.writer=inline"
    table = {
        "none": [],
        "memory-kv": ["sinks.kv_events=[{type: memory}]"],
        "jsonl-kv": [kv],
        "jsonl-fpm": [fpm],
        "jsonl-both": [kv, fpm],
        "jsonl-both-inline": [kv, fpm, inline],
        "jsonl-both-unformatted": [kv, fpm, inline],
        "zmq-kv": ['sinks.kv_events=[{type: zmq, endpoint: "tcp://127.0.0.1:45557"}]'],
        "zmq-fpm": ['sinks.fpm=[{type: zmq, endpoint: "tcp://127.0.0.1:45380"}]'],
        "prometheus": [f'sinks.fpm=[{{type: prometheus, path: "{out}/metrics.om"}}]'],
    }
    return table


def known_sinks() -> list[str]:
    """The configuration names :func:`sink_sets` knows, in its order."""
    return list(sink_table(Path(".")))


#: Configurations replayed with the JSONL line formatters replaced (``perf_unformatted``).
UNFORMATTED = frozenset({"jsonl-both-unformatted"})


def run_once(trace: Path, sets: list[str], out_dir: Path, unformatted: bool = False,
             timeout: float | None = None, env: dict[str, str] | None = None) -> dict:
    """One replay in a child (``env``: its environment, default this one's); its
    ``perf_child`` result, or ``{"error": ...}``."""
    out = out_dir / "child.json"
    env = dict(os.environ if env is None else env)
    env.pop(UNFORMATTED_ENV, None)
    if unformatted:
        env[UNFORMATTED_ENV] = "1"
    proc = subprocess.run([sys.executable, str(CHILD), str(out), str(trace), *sets],
                          capture_output=True, text=True, check=False, env=env, timeout=timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    if unformatted and any(p.stat().st_size for p in out_dir.glob("*.jsonl")):
        return {"error": "the line formatters were not replaced (servesim.sinks.builtin compiled?)"}
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="vllm-4w-kv")
    ap.add_argument("-n", "--requests", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sinks", default="none,jsonl-kv,jsonl-fpm,jsonl-both,jsonl-both-inline")
    ap.add_argument("--against", default=None, metavar="CHECKOUT",
                    help="also replay every configuration from this checkout, in the same rounds")
    ap.add_argument("--instructions", action="store_true",
                    help="count each replay's instructions under valgrind (once) instead of timing it")
    ap.add_argument("--trace-dir", default=str(Path(tempfile.gettempdir()) / "servesim-bench-traces"))
    args = ap.parse_args(argv)
    if args.against is not None and not (Path(args.against) / "core" / "src" / "servesim").is_dir():
        ap.error(f"--against {args.against}: not a servesim checkout (no core/src/servesim)")
    if args.instructions and valgrind() is None:
        ap.error("--instructions needs valgrind on PATH")
    (case,) = select_cases([args.case], False, args.requests)
    trace = ensure_trace(case.trace, Path(args.trace_dir))
    print(f"# {ensure_bytecode()}", file=sys.stderr)  # timed as an installed copy runs
    trees: dict[str, dict[str, str] | None] = {"installed": None}
    if args.against is not None:
        trees[args.against] = tree_env(args.against)
        print(f"# {ensure_bytecode(sys.executable, trees[args.against])}", file=sys.stderr)
    names = args.sinks.split(",")
    known = known_sinks()
    if any(name not in known for name in names):
        ap.error(f"--sinks {args.sinks}: each name one of {', '.join(known)}")
    if args.instructions:
        print(f"case {case.name}, {case.n} requests, instructions of the replay\n")
        for tree, env in trees.items():
            if len(trees) > 1:
                print(f"{'installed packages' if tree == 'installed' else 'checkout ' + tree}:\n")
            for line in count_table(names, count_all(trace, case, names, env)):
                print(line)
            print()
        return 0
    results = {tree: Results() for tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):  # interleaved, so machine load hits every row alike
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for tree in order:
                results[tree].rounds.append({})
                for name in names:
                    res = run_once(trace, [*case.servesim_sets(), *sink_sets(name, Path(tmp))],
                                   Path(tmp), unformatted=name in UNFORMATTED, env=trees[tree])
                    results[tree].add(name, res)
    print(f"case {case.name}, {case.n} requests, fastest of {args.repeat}\n")
    for tree, res in results.items():
        if len(results) > 1:
            print(f"{'installed packages' if tree == 'installed' else 'checkout ' + tree}:\n")
        for line in res.table(names):
            print(line)
        print()
        for line in round_lines(names, res.rounds):
            print(line)
        for line in round_lines(names, res.wall_rounds, "wall"):
            print(line)
        print()
    if args.against is not None:
        for line in paired_lines(names, results["installed"].rounds, results[args.against].rounds):
            print(line)
    return 0


def count_all(trace: Path, case: Case, names: list[str],
              env: dict[str, str] | None) -> dict[str, tuple[int, int] | str]:
    """Per configuration: ``(instructions, passes)`` of its replay, or why it failed."""
    out: dict[str, tuple[int, int] | str] = {}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, str(CHILD), str(Path(tmp) / "child.json"), str(trace),
                   *case.servesim_sets(), *sink_sets(name, Path(tmp))]
            run_env = dict(os.environ if env is None else env)
            run_env.pop(UNFORMATTED_ENV, None)
            if name in UNFORMATTED:
                run_env[UNFORMATTED_ENV] = "1"
            try:
                n = replay_count(cmd, run_env)
            except CountError as exc:
                out[name] = str(exc)
                continue
            out[name] = (n, json.loads((Path(tmp) / "child.json").read_text())["passes"])
    return out


def count_table(names: list[str], counts: dict[str, tuple[int, int] | str]) -> list[str]:
    """Markdown rows: each configuration's replay instructions, passes and ratio to ``none``."""
    base = counts.get("none")
    out = ["| sinks | instructions | passes | x none |", "|---|---:|---:|---:|"]
    for name in names:
        got = counts.get(name, "no run")
        if isinstance(got, str):
            out.append(f"| {name} | error: {got} | | |")
            continue
        ratio = f"{got[0] / base[0]:.3f}" if isinstance(base, tuple) and base[0] else ""
        out.append(f"| {name} | {got[0]:,} | {got[1]} | {ratio} |")
    return out


class Results:
    """One tree's replays: per configuration the fastest CPU time of the replaying process,
    the fastest wall time, the writer process's CPU time in the fastest-CPU run, the passes,
    its last error, and every round's CPU and wall times (:meth:`add` records into the last
    round; :attr:`wall_rounds` beside :attr:`rounds`)."""

    def __init__(self) -> None:
        self.best: dict[str, float] = {}
        self.best_wall: dict[str, float] = {}
        self.writer: dict[str, float] = {}
        self.passes: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.rounds: list[dict[str, float]] = []
        self.wall_rounds: list[dict[str, float]] = []

    def add(self, name: str, res: dict) -> None:
        if "error" in res:
            self.errors[name] = res["error"]
            return
        if len(self.wall_rounds) < len(self.rounds):
            self.wall_rounds.append({})
        self.rounds[-1][name] = res["cpu_s"]
        self.wall_rounds[-1][name] = res["wall_s"]
        if res["cpu_s"] < self.best.get(name, float("inf")):
            self.best[name] = res["cpu_s"]
            self.writer[name] = res.get("writer_cpu_s", 0.0)
        self.best_wall[name] = min(self.best_wall.get(name, float("inf")), res["wall_s"])
        self.passes[name] = res["passes"]

    def table(self, names: list[str]) -> list[str]:
        base, base_wall = self.best.get("none"), self.best_wall.get("none")
        out = ["| sinks | CPU s | x none | wall s | x none | writer CPU s | passes |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for name in names:
            if name not in self.best:
                out.append(f"| {name} | error: {self.errors.get(name, 'no run')} | | | | | |")
                continue
            ratio = f"{self.best[name] / base:.2f}" if base else ""
            wall_ratio = f"{self.best_wall[name] / base_wall:.2f}" if base_wall else ""
            out.append(f"| {name} | {self.best[name]:.2f} | {ratio} | {self.best_wall[name]:.2f} | "
                       f"{wall_ratio} | {self.writer[name]:.2f} | {self.passes[name]} |")
        return out


def paired_lines(names: list[str], mine: list[dict[str, float]],
                 theirs: list[dict[str, float]]) -> list[str]:
    """Per configuration: the installed run's CPU seconds less the checkout's, in each round
    that ran both, and their median."""
    out = []
    for name in names:
        got = [m[name] - t[name] for m, t in zip(mine, theirs, strict=True) if name in m and name in t]
        if got:
            out.append(f"- {name}: installed - checkout by round "
                       + ", ".join(f"{x:+.3f}" for x in got) + f" s (median {median(got):+.3f} s)")
    return out


def round_lines(names: list[str], rounds: list[dict[str, float]], what: str = "CPU") -> list[str]:
    """Per configuration other than ``none``: its ratio to ``none`` (of ``what``, the
    figure ``rounds`` holds) in each round that ran both, and their median."""
    out = []
    for name in names:
        if name == "none":
            continue
        got = [r[name] / r["none"] for r in rounds if name in r and r.get("none")]
        if got:
            out.append(f"- {name}: {what} x none by round " + ", ".join(f"{x:.2f}" for x in got)
                       + f" (median {median(got):.2f})")
    return out


if __name__ == "__main__":
    sys.exit(main())
