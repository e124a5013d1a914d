"""``servesim run``: replay a workload through a simulated deployment and print a report."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``servesim run`` arguments to ``parser``."""
    parser.add_argument("config", nargs="?", default=None, metavar="CONFIG.yaml",
                        help="YAML config (engine/cluster/workload/report/sinks); optional")
    parser.add_argument("--trace", default=None, metavar="PATH", help="sets workload.trace.path")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. engine.max_num_seqs=64 (repeatable)")
    parser.add_argument("--output-json", default=None, metavar="PATH",
                        help="write the report JSON here (report.output_json)")
    parser.add_argument("--per-request", default=None, metavar="PATH",
                        help="write one JSON line per request here (report.per_request)")
    parser.add_argument("--quiet", action="store_true", help="no table, no progress")


def run(args: argparse.Namespace) -> int:
    """Run ``servesim run``; returns the exit status."""
    raise NotImplementedError("servesim run is not implemented yet")
