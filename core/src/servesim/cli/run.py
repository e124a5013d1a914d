"""``servesim run``: replay a workload through a simulated deployment and print a report.

``servesim run [CONFIG.yaml] [--trace PATH] [--set key=value ...] [--output-json PATH] [--pass-log PATH]
[--per-request PATH] [--plot DIR] [--json] [--quiet]``. With no config and no trace it runs the
built-in default scenario (a seeded synthetic workload with shared prefixes on one worker). The
report table goes to stdout; a progress bar (servesim.cli.progress) goes to stderr only when stderr
is a terminal and the run has taken more than a second. Wall-clock time is read only here and
there, never inside the simulation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from servesim.config.output_paths import file_problem
from servesim.errors import UserError

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig
    from servesim.replay.timeline import FigureWriter, PassTimeline


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``servesim run`` arguments to ``parser``."""
    parser.add_argument("config", nargs="*", default=[], metavar="CONFIG.yaml",
                        help="YAML config (engine/cluster/workload/report/sinks); optional; several "
                             "are merged in order, later keys winning")
    parser.add_argument("--trace", default=None, metavar="PATH",
                        help="replay this Mooncake JSONL trace (sets workload.trace.path)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. engine.max_num_seqs=64 (repeatable)")
    parser.add_argument("--output-json", default=None, metavar="PATH",
                        help="write the report JSON here (overrides report.output_json)")
    parser.add_argument("--per-request", default=None, metavar="PATH",
                        help="write one JSON line per request here (overrides report.per_request)")
    parser.add_argument("--pass-log", default=None, metavar="PATH",
                        help="write one JSON line per engine pass here (docs/conformance.md)")
    parser.add_argument("--plot", default=None, metavar="DIR",
                        help="write PNG figures of the run here (overrides report.plot; "
                        "docs/report.md)")
    parser.add_argument("--json", action="store_true",
                        help="print the report JSON on stdout instead of the table")
    parser.add_argument("--quiet", action="store_true",
                        help="print nothing on success, not even --json (files are still written)")


def _check_writable(path: str, origin: str) -> None:
    """Fail before a long run, not after it, when an output file cannot be written: the
    check ``servesim validate`` makes (:func:`servesim.config.output_paths.file_problem`).
    Nothing is created or touched, so a run that fails later leaves an earlier report in
    place; the writer creates the missing folders."""
    reason = file_problem(path)
    if reason is not None:
        raise UserError(f"{origin}: cannot write {path!r}: {reason}")


def _figure_writer(loaded: LoadedConfig, origin: str) -> FigureWriter:
    """The installed figure writer (``servesim_figure_writer``); a run asked for figures with
    none installed fails before it starts."""
    writer = loaded.plugins.pm.hook.servesim_figure_writer()
    if writer is None:
        raise UserError(f"{origin}: drawing figures needs a plugin that draws them; install "
                        "servesim-plot (pip install ./plugins/plot)")
    return writer


def _timeline(plot_dir: str | None, origin: str, loaded: LoadedConfig
              ) -> tuple[FigureWriter, PassTimeline] | None:
    """The figure writer and its pass collector for ``--plot``, only then. The folder is
    made now: a bad one fails before the run, not after it."""
    if not plot_dir:
        return None
    writer = _figure_writer(loaded, origin)
    try:
        os.makedirs(plot_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{origin}: cannot create the figures folder {plot_dir!r}: "
                        f"{exc.strerror or exc}") from None
    from servesim.config.output_paths import folder_problem

    problem = folder_problem(plot_dir)
    if problem is not None:
        raise UserError(f"{origin}: cannot write the figures folder {plot_dir!r}: {problem}")
    return writer, writer.timeline()


def run(args: argparse.Namespace) -> int:
    """Run ``servesim run``; returns the exit status (UserErrors propagate to the CLI edge)."""
    from servesim.config.loader import load_config
    from servesim.config.output_paths import write_replacing
    from servesim.replay.runner import simulate
    from servesim.report.summary import dumps, format_table, per_request_lines

    sets = list(getattr(args, "sets", None) or [])
    if args.trace is not None:
        # --trace replaces whatever workload the file describes
        sets += ["workload.synthetic=null", f"workload.trace.path={json.dumps(args.trace)}"]
    loaded = load_config(args.config, sets)
    report_cfg = loaded.sim.report
    json_path = args.output_json or report_cfg.output_json
    per_request_path = args.per_request or report_cfg.per_request
    if json_path:
        _check_writable(json_path, "--output-json" if args.output_json else "report.output_json")
    if per_request_path:
        _check_writable(per_request_path, "--per-request" if args.per_request else "report.per_request")
    pass_log = getattr(args, "pass_log", None)
    if pass_log:
        _check_writable(pass_log, "--pass-log")
    plot_dir = getattr(args, "plot", None) or report_cfg.plot
    figures_to = _timeline(plot_dir, "--plot" if getattr(args, "plot", None) else "report.plot", loaded)
    timeline = None if figures_to is None else figures_to[1]
    progress = None
    if not args.quiet and sys.stderr.isatty():
        from servesim.cli.progress import RunProgress

        progress = RunProgress(sys.stderr)
    started = time.monotonic()
    try:
        result = simulate(loaded, record_token_times=per_request_path is not None, progress=progress,
                          pass_log=pass_log, timeline=timeline)
    finally:
        if progress is not None:
            progress.finish()
    wall_s = time.monotonic() - started
    if json_path:
        write_replacing(json_path, dumps(result.report))
    if per_request_path:
        lines = per_request_lines(result.log, result.session_ids)
        write_replacing(per_request_path, "".join(line + "\n" for line in lines))
    figures = [] if figures_to is None else figures_to[0].write(result, figures_to[1], plot_dir)
    if args.quiet:
        pass  # docs/configuration.md: nothing on stdout, --json included; files are written
    elif getattr(args, "json", False):
        sys.stdout.write(dumps(result.report))
    else:
        sys.stdout.write(format_table(result.report, wall_s))
        for label, path in (("report", json_path), ("per-request records", per_request_path),
                            ("pass log", pass_log)):
            if path:
                sys.stdout.write(f"{label} written to {path}\n")
        if figures:
            sys.stdout.write(f"{len(figures)} figures written to {plot_dir}\n")
    return 0
