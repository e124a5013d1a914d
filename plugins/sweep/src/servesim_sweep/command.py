"""``servesim sweep SWEEP.yaml [--executor local|ray] [--parallel N] [--address ADDR] [--out DIR]
[--resume]``: run every point of a sweep file (docs/sweep.md) and write

* ``DIR/points/<id>.json``: each point's record (overrides, seed, status, error, GPUs, report);
* ``DIR/results.csv`` and ``DIR/results.parquet``: one row per point;
* ``DIR/pareto.png``: throughput per GPU against the SLA latency, the front highlighted;

and print the table of the best points against the objectives. Wall-clock time is read only by
the progress bar (servesim.cli.progress), on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from servesim.config.output_paths import write_replacing
from servesim.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP.yaml", help="the sweep file (docs/sweep.md)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="local processes (default) or a Ray cluster")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="points at once (default: the number of cores)")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="the Ray cluster to use (default: start a local one)")
    parser.add_argument("--out", default="sweep-results", metavar="DIR",
                        help="output folder (default: sweep-results)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the points DIR already holds as completed; run the rest")
    parser.set_defaults(servesim_command=run)


class SweepInterrupted(UserError):
    """SIGINT or SIGTERM ended the sweep: one line, exit status 128 + the signal number (130,
    143), the points completed so far on disk for ``--resume``."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`SweepInterrupted` in the main thread; once one has,
    both are ignored until the sweep has stopped its workers (the cleanup is not itself
    interrupted). The previous handlers come back on leaving."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: Any) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        raise SweepInterrupted(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _resumed(path: str, point_id: str) -> dict[str, Any] | None:
    """A completed record of ``point_id`` in ``path``, or None (absent, failed or unreadable:
    the point runs again)."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8 at all
        return None
    if not isinstance(record, dict) or record.get("id") != point_id or record.get("status") != "ok":
        return None
    return record


def _records(args: argparse.Namespace, sweep: Any, base: str, points_dir: str) -> list[Any]:
    from servesim.report.summary import dumps

    from servesim_sweep.executors import default_parallel, run_local, run_ray

    records: list[Any] = [None] * len(sweep.points)
    if args.resume:
        for i, point in enumerate(sweep.points):
            records[i] = _resumed(os.path.join(points_dir, f"{point.id}.json"), point.id)
    todo = [(i, p) for i, p in enumerate(sweep.points) if records[i] is None]
    parallel = args.parallel if args.parallel is not None else default_parallel()
    progress = None
    if sys.stderr.isatty():
        from servesim.cli.progress import SweepProgress

        progress = SweepProgress(sys.stderr)
    done = len(sweep.points) - len(todo)
    failed = 0
    results = (run_ray(base, todo, parallel, args.address) if args.executor == "ray"
               else run_local(base, todo, parallel))
    try:
        if progress is not None:
            progress(done, len(records), failed)
        for index, record in results:
            records[index] = record
            write_replacing(os.path.join(points_dir, f"{record['id']}.json"), dumps(record))
            done += 1
            failed += record["status"] != "ok"
            if progress is not None:
                progress(done, len(records), failed)
    except SweepInterrupted as exc:
        results.close()  # stops the workers now, before the message
        raise SweepInterrupted(exc.signum, f"interrupted by {signal.Signals(exc.signum).name}: "
                               f"{done} of {len(records)} points complete in {points_dir} "
                               "(servesim sweep --resume runs the rest)") from None
    finally:
        results.close()
        if progress is not None:
            progress.finish()
    return records


def _check_outputs(out: str, points_dir: str, sweep: Any) -> None:
    """Every file the sweep writes can be written, before any point runs (the tables and
    the figure are written only after the last one)."""
    from servesim.config.output_paths import file_problem

    names = ["results.csv", "results.parquet", "pareto.png"]
    paths = [os.path.join(out, n) for n in names]
    paths += [os.path.join(points_dir, f"{p.id}.json") for p in sweep.points]
    for path in paths:
        problem = file_problem(path)
        if problem is not None:
            raise UserError(f"--out: cannot write {path!r}: {problem}")


def run(args: argparse.Namespace) -> int:
    from servesim_sweep.spec import load_sweep

    if args.parallel is not None and args.parallel < 1:
        raise UserError(f"--parallel must be at least 1, got {args.parallel}")
    if args.address is not None and args.executor != "ray":
        raise UserError("--address needs --executor ray")
    sweep = load_sweep(args.sweep)
    with _interruptible():
        return _run(args, sweep)


def _run(args: argparse.Namespace, sweep: Any) -> int:
    from servesim.config.output_paths import folder_problem

    from servesim_sweep import pareto, results
    from servesim_sweep.point import base_path, check_points

    problem = folder_problem(args.out)
    if problem is not None:
        raise UserError(f"--out: cannot write into {args.out!r}: {problem}")
    points_dir = os.path.join(args.out, "points")
    try:
        os.makedirs(points_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {points_dir}: {exc.strerror or exc}") from None
    _check_outputs(args.out, points_dir, sweep)
    base = base_path(sweep, args.out)
    known, open_ended = results.known_keys(check_points(sweep, base))
    results.check_known_keys(known, open_ended, sweep.objectives, sweep.source, sweep.pareto_given)
    records = results.ensure_rows(_records(args, sweep, base, points_dir))
    columns, table = results.rows(records)
    results.write_csv(os.path.join(args.out, "results.csv"), columns, table)
    results.write_parquet(os.path.join(args.out, "results.parquet"), columns, table)
    labels = [p.label() for p in sweep.points]
    configs = results.evaluate(records, labels, sweep.objectives, (sweep.pareto_x, sweep.pareto_y))
    results.check_keys(configs, sweep.objectives, sweep.source, sweep.pareto_given)
    drew = pareto.draw(os.path.join(args.out, "pareto.png"), configs, sweep.pareto_x,
                       sweep.pareto_y, sweep.objectives)
    _summary(records, configs, sweep, args.out, drew)
    return 1 if records and all(r["status"] != "ok" for r in records) else 0


def _summary(records: list[dict[str, Any]], configs: list[Any], sweep: Any, out: str,
             drew: bool) -> None:
    from rich.console import Console

    from servesim_sweep import results

    console = Console(file=sys.stdout, width=120)
    console.print(results.best_table(configs, sweep.objectives, len(configs)))
    if not results.best(configs, sweep.objectives):
        console.print("No configuration meets the constraints.")
    failed = [r for r in records if r["status"] != "ok"]
    for r in failed:
        sys.stderr.write(f"servesim: point {r['id']} failed: {r['error']}\n")
    files = "results.csv, results.parquet" + (", pareto.png" if drew else "")
    console.print(f"{len(records)} points ({len(failed)} failed); {files} and points/ "
                  f"written to {out}")
