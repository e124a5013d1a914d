"""The ``servesim calibrate`` command's arguments, kept apart from :mod:`servesim_calibrate.fit`
(numpy and the timing models) so that building the parser imports nothing heavy."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(servesim_command=_run)
    p.add_argument("fpm", metavar="FPM.jsonl", help="forward-pass metrics, one record per line")
    p.add_argument("--model", choices=("polynomial", "interpolated"), default="interpolated",
                   help="the timing model to fit (default interpolated)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="write the engine.timing_model config fragment here (YAML)")
    p.add_argument("--kv-tokens", type=int, default=None, metavar="N",
                   help="polynomial: the KV pool's size in tokens (num_gpu_blocks x block_size)")


def _run(args: argparse.Namespace) -> int:
    from servesim_calibrate.fit import run

    return run(args)
