"""The ``servesim`` command: ``run`` (the default), ``validate`` and ``plugins``; installed
plugins add more (``servesim_add_commands``: ``serve``, ``plot``, ``sweep``, ``calibrate``).

Every :class:`~servesim.errors.UserError` is caught here, at the edge, and printed as one line
``servesim: error: <message>`` with exit status 2 and no traceback (style-anchors.md rule 10,
after pytest's ``UsageError`` → ``ExitCode.USAGE_ERROR``). Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from servesim.errors import ConfigError, EngineError, SimError, UserError

PROG = "servesim"


def _version() -> str:
    from servesim.plugins import servesim_version

    return servesim_version()


class _VersionAction(argparse.Action):
    """``--version``, with the version read only when asked for (reading it needs
    ``importlib.metadata``, which a run does not otherwise import); printed on stdout, as
    argparse's own ``version`` action does."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str = "show the version and exit") -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def _cli_run() -> ModuleType | None:
    """The replay command's module, or None while it is not installed."""
    try:
        import servesim.cli.run as module
    except ModuleNotFoundError as exc:
        if exc.name != "servesim.cli.run":
            raise
        return None
    return module


def build_parser(*, with_plugins: bool = True) -> argparse.ArgumentParser:
    """The ``servesim`` parser; ``with_plugins`` adds the commands of installed plugins
    (``servesim_add_commands``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="GPU-free simulator of LLM-serving engines. With no command, runs the "
        "built-in default scenario ('servesim run').",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="replay a workload and print a serving report")
    module = _cli_run()
    if module is not None:
        module.add_arguments(run)
    else:
        run.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    validate = sub.add_parser("validate", help="check a config file without running it")
    validate.add_argument("config", metavar="CONFIG.yaml", nargs="*", default=[],
                          help="the YAML config to check (its trace file is read too); several are "
                               "merged in order, later keys winning; none: the built-in default "
                               "scenario with the --set overrides")
    validate.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. engine.max_num_seqs=64 (repeatable)",
    )

    plugins = sub.add_parser("plugins", help="list discovered plugins grouped by kind")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    if with_plugins:
        from servesim.plugins import Plugins

        Plugins().add_commands(sub)
    return parser


def cmd_run(args: argparse.Namespace) -> int:
    module = _cli_run()
    if module is None:
        print(
            f"{PROG}: 'servesim run' is not available in this installation (the replay "
            "command, servesim.cli.run, is missing); 'servesim plugins' lists what is installed",
            file=sys.stderr,
        )
        return 2
    return int(module.run(args))


def cmd_validate(args: argparse.Namespace) -> int:
    from servesim.cli.validate import check_outputs, construct_all, spec_name
    from servesim.config.loader import load_config

    loaded = load_config(args.config, args.sets)
    args.config = loaded.source
    construct_all(loaded)  # a plugin may reject its options only when built
    check_outputs(loaded)
    sim = loaded.sim
    trace = sim.workload.trace
    if trace is not None:
        if os.path.isdir(trace.path):
            raise ConfigError(
                f"{trace.path!r} is a directory, not a trace file",
                path="workload.trace.path",
                source=args.config,
            )
        if not os.path.isfile(trace.path):
            raise ConfigError(
                f"no such trace file {trace.path!r}", path="workload.trace.path", source=args.config
            )
        # Read it too: a malformed line is reported now (file:line), not after a long start-up.
        from servesim.replay.runner import load_workload

        load_workload(sim.workload, loaded.plugins, sim.engine)
    trace = sim.workload.trace
    workload = f"trace (format {trace.format})" if trace is not None else "synthetic"
    print(
        f"OK: {args.config or 'the built-in default scenario'}: backend {sim.engine.backend} "
        f"(block_size {sim.engine.block_size}, dp_size {sim.engine.dp_size}), "
        f"timing {loaded.engine.timing_type}, eviction {spec_name(sim.engine.eviction_policy)}, "
        f"{_workers(sim.cluster)}, router {sim.cluster.router}, workload {workload}{_sinks(sim.sinks)}"
        f"{_kinds(sim)}"
    )
    return 0


def _kinds(sim: Any) -> str:
    """``, admission queue_shed, planner schedule`` for the other plugin kinds a config
    selects (nothing when it selects none)."""
    from servesim.cli.validate import spec_name

    parts = []
    admission = sim.workload.admission
    if admission:
        parts.append(f", admission {spec_name(admission)}")
    if sim.planner is not None:
        parts.append(f", planner {spec_name(sim.planner)}")
    return "".join(parts)


def _sinks(sinks: Any) -> str:
    """``, kv_events jsonl+tee, fpm jsonl`` for the configured sinks (nothing when none)."""
    from servesim.cli.validate import spec_name

    parts = [f"{name} {'+'.join(spec_name(s) for s in specs)}"
             for name, specs in (("kv_events", sinks.kv_events), ("fpm", sinks.fpm)) if specs]
    return "".join(f", {part}" for part in parts)


def _workers(cluster: Any) -> str:
    prefill = getattr(cluster, "prefill_workers", 0)
    if prefill:
        return f"{prefill} prefill + {_count(cluster.decode_workers, 'decode worker')}"
    pools = getattr(cluster, "pools", ())
    if pools:  # cluster.workers is unused: each pool has its own count
        total = sum(p.workers for p in pools)
        each = ", ".join(f"{p.name} {p.workers}" for p in pools)
        return f"{_count(total, 'worker')} in {_count(len(pools), 'pool')} ({each})"
    return _count(cluster.workers, "worker")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("s" if n != 1 else "")


def plugins_listing() -> dict[str, Any]:
    """What ``servesim plugins --json`` prints: registrations by kind, every plugin, and the
    plugins left out because they failed to load or implement an unknown hook (with their
    errors), so one broken plugin does not hide the others."""
    from servesim.plugins import Plugins

    plugins = Plugins(tolerant=True)
    registries = plugins.registries()
    pm = plugins.pm
    kinds: dict[str, list[dict[str, str]]] = {}
    for kind, registry in registries.items():
        rows = []
        for entry in registry:
            info = pm.distribution_of(entry.plugin)
            rows.append(
                {
                    "name": entry.name,
                    "plugin": entry.plugin,
                    "distribution": info.name,
                    "version": info.version,
                }
            )
        kinds[kind] = rows
    listed = [
        {"name": p.name, "distribution": p.distribution, "version": p.version, "hooks": list(p.hooks)}
        for p in plugins.plugin_infos()
    ]
    return {"kinds": kinds, "plugins": listed, "broken": dict(sorted(pm.broken.items()))}


def cmd_plugins(args: argparse.Namespace) -> int:
    listing = plugins_listing()
    status = 1 if listing["broken"] else 0
    if args.json:
        print(json.dumps(listing, indent=2))
        return status
    for kind, rows in listing["kinds"].items():
        print(f"{kind}:")
        if not rows:
            print("  (none)")
        width = max((len(r["name"]) for r in rows), default=0)
        for r in rows:
            print(f"  {r['name']:<{width}}  plugin {r['plugin']}  ({r['distribution']} {r['version']})")
    print("plugins:")
    for p in listing["plugins"]:
        hooks = ", ".join(h.removeprefix("servesim_") for h in p["hooks"]) or "no hooks"
        print(f"  {p['name']}  ({p['distribution']} {p['version']}): {hooks}")
    for name, error in listing["broken"].items():
        print(f"broken plugin {name}: {error}")
    return status


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "plugins": cmd_plugins}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``servesim`` console script; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list:
        args_list = ["run"]
    try:
        # Plugins add commands only when the word is not a built-in one: `servesim run` does
        # not load every plugin's command machinery before the replay's own plugin load.
        first = args_list[0]
        builtin = first in COMMANDS or (first.startswith("-") and first not in ("-h", "--help"))
        parser = build_parser(with_plugins=not builtin)
        args = parser.parse_args(args_list)
        func = getattr(args, "servesim_command", None) or COMMANDS[args.command]
        status = func(args)
        sys.stdout.flush()  # a closed pipe fails here, inside the handler below
        return status
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except EngineError as exc:
        # The engine contract refused what the inputs made it do (e.g. a timing model whose
        # durations overflow to infinity): a simulation failure, not a crash.
        print(f"{PROG}: error: simulation failed: {exc}", file=sys.stderr)
        return 1
    except SimError as exc:
        from servesim.sinks.base import SinkError

        if not isinstance(exc, SinkError):
            raise
        # A sink failed while the replay ran (a full disk, a file that cannot take more):
        # the run did not finish, and the message names the sink and the simulated time.
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except Terminated:
        print(f"{PROG}: terminated by SIGTERM; the run did not finish (no report was written, "
              "and the sink files and pass log written so far are left as PATH.partial, with "
              "whole lines)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `servesim plugins | head`: the reader left. Send the rest of stdout nowhere so the
        # interpreter's final flush does not fail again, and exit as a SIGPIPE'd tool does.
        _discard_stdout()
        return 141
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        # stdout could not take the output (`servesim run > /dev/full`): one line, and the
        # rest of stdout goes nowhere so that the final flush does not fail again.
        _discard_stdout()
        print(f"{PROG}: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
        return 1


#: Errors of a write that could not be made (full disk, quota, I/O, file too large).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def _discard_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def spare_exit_collection() -> None:
    """Move every object still alive into the collector's permanent generation, so that the
    interpreter's final collection at exit does not walk what the command built (a replay's
    engines, pools and log hold reference cycles: about 4% of a 10,000-request `servesim run`'s
    CPU went to that walk). Only for a process that is about to exit: its files are closed
    and its output written by then, and nothing it holds needs a finaliser."""
    import gc

    gc.freeze()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that it unwinds as Ctrl-C does: sinks and
    logs are closed on the way out and keep whole lines."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def console() -> int:
    """The ``servesim`` console script: :func:`main`, then :func:`spare_exit_collection`
    (``main`` itself, which tests and notebooks call, leaves the collector alone). SIGTERM
    ends it as Ctrl-C does, with its own line and exit status 143 (128 + SIGTERM); commands
    that serve or run workers (``serve``, ``sweep``) install their own handlers."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    status = main()
    spare_exit_collection()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console())
