"""Entry-point module of servesim-overhead: hook implementations only; machinery loads lazily."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from servesim import hookimpl

if TYPE_CHECKING:
    from servesim.registry import Registry


@hookimpl
def servesim_register_timing_models(registry: Registry) -> None:
    """Register ``overhead``: engine costs around an inner timing model's kernels."""
    registry.add_lazy("overhead", "servesim_overhead.timing:OverheadTiming")


@hookimpl
def servesim_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servesim fit-overhead``."""
    parser = subparsers.add_parser(
        "fit-overhead", help="fit the overhead timing model's per-step CPU terms to benchmark results (docs/fidelity.md)")
    parser.add_argument("config", metavar="CONFIG.yaml", help="the deployment (engine.timing_model: {type: overhead})")
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="vllm bench serve --save-result JSON files, or .csv/.jsonl tables of results")
    parser.add_argument("--client", metavar="CLIENT.yaml",
                        help="bench_client options the results do not record (random_input_len ...)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable)")
    parser.set_defaults(servesim_command=_fit)


def _fit(args: argparse.Namespace) -> int:
    from servesim_overhead.command import fit_overhead

    return fit_overhead(args)
