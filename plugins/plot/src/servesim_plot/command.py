"""``servesim plot REPORT.json [--per-request R.jsonl] [--fpm F.jsonl] -o DIR [--compare
OTHER.json [--compare-per-request R2.jsonl]]``: the figures of ``servesim run --plot`` drawn
from files a run (simulated or real) has already written (docs/report.md)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", help="a report written by --output-json")
    parser.add_argument("--per-request", default=None, metavar="R.jsonl",
                        help="its per-request JSONL: exact CDFs, TTFT breakdown, worker balance")
    parser.add_argument("--fpm", default=None, metavar="F.jsonl",
                        help="forward-pass metrics JSONL (servesim's sink or the wire schema): "
                        "the per-worker timelines")
    parser.add_argument("-o", "--out", required=True, metavar="DIR", help="write the PNGs here")
    parser.add_argument("--compare", default=None, metavar="OTHER.json",
                        help="overlay this report's latency CDFs")
    parser.add_argument("--compare-per-request", default=None, metavar="R2.jsonl",
                        help="the compared run's per-request JSONL (exact compared CDFs)")
    parser.set_defaults(servesim_command=run)


def run(args: argparse.Namespace) -> int:
    from servesim.config.output_paths import folder_problem

    from servesim_plot.draw import write_figures
    from servesim_plot.files import load

    problem = folder_problem(args.out)
    if problem is not None:
        from servesim.errors import UserError

        raise UserError(f"--out: cannot write the figures folder {args.out!r}: {problem}")
    data = load(args.report, args.per_request, args.fpm)
    compare = None
    if args.compare is not None:
        compare = load(args.compare, args.compare_per_request)
    elif args.compare_per_request is not None:
        from servesim.errors import UserError

        raise UserError("--compare-per-request needs --compare")
    paths = write_figures(data, args.out, compare)
    for path in paths:
        sys.stdout.write(f"{path}\n")
    return 0
