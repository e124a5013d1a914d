"""Entry-point module: hook implementations only; the machinery is imported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim import hookimpl

if TYPE_CHECKING:
    import argparse

    from servesim.registry import Registry


@hookimpl
def servesim_register_backends(registry: Registry) -> None:
    registry.add_lazy("toy", "servesim_toy.rank:ToyRank")
    registry.add_lazy("toy_paged", "servesim_toy.paged:PagedToyRank")


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    registry.add_lazy("toy_constant", "servesim_toy.timing:ConstantTiming")
    registry.add_lazy("toy_roofline", "servesim_toy.roofline:RooflineTiming")


@hookimpl
def servesim_register_kv_event_sinks(registry: Registry) -> None:
    registry.add_lazy("toy_tally", "servesim_toy.sinks:TallySink")


@hookimpl
def servesim_register_routers(registry: Registry) -> None:
    registry.add_lazy("toy_least_loaded", "servesim_toy.router:LeastLoadedRouter")


@hookimpl
def servesim_register_trace_formats(registry: Registry) -> None:
    registry.add_lazy("toy_csv", "servesim_toy.trace:CsvTrace")


@hookimpl
def servesim_run_started(config: Any) -> bool:
    from servesim_toy.observer import run_started

    return run_started(config)


@hookimpl
def servesim_pass_completed(worker_id: int) -> None:
    from servesim_toy.observer import pass_completed

    pass_completed(worker_id)


@hookimpl
def servesim_report_extra() -> dict[str, Any]:
    from servesim_toy.observer import report_extra

    return report_extra()


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    from servesim_toy.observer import write_trace

    p = subparsers.add_parser("toy-trace", help="write a sample trace for the toy_csv format")
    p.add_argument("out", metavar="OUT.csv")
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--gap-ms", type=float, default=50.0)
    p.set_defaults(servesim_command=write_trace)
