"""The SGLang half of ``run.py --engine sglang``: scenarios, the oracle and one comparison.

servesim's ``sglang`` rank against SGLang 0.5.23's real ``Scheduler``
(``sglang_sched_trace.py``, oracle venv from ``setup_sglang_oracle.sh``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from oracle import SGLANG_PYTHON, SGLANG_SCRIPT, load_saved, run_oracle_batch, save_scenario
from servesim_sglang.conformance import (
    COMPARED_FIELDS,
    KEPT_FIELDS,
    SglangOracleOptions,
    build_engine,
    compare_steps,
    load_golden,
    run_servesim,
)
from servesim_vllm.conformance import Comparison, ScenarioSpec, make_trace
from sglang_scenarios import EXTRA, GOLDEN, PRIORITY, priority_scenario, random_scenario

GOLDEN_ROOT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "sglang_oracle"


def oracle_available() -> bool:
    return SGLANG_PYTHON.is_file() and SGLANG_SCRIPT.is_file()


PRIO_GOLDEN_ROOT = GOLDEN_ROOT.parent / "sglang_oracle_prio"
#: The oracle with SGLang's priority scheduling on (wraps SGLANG_SCRIPT).
PRIO_SCRIPT = Path(__file__).resolve().parent / "sglang_prio_trace.py"


def run_oracle(jobs: list[tuple[list[dict[str, Any]], SglangOracleOptions]], workers: int = 2) -> list[Any]:
    """One oracle process per job (SGLang builds its parallel runtime once per process; each
    start costs a few seconds), ``workers`` at a time, results in job order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job: tuple[list[dict[str, Any]], SglangOracleOptions]) -> Any:
        script = PRIO_SCRIPT if job[1].priority else SGLANG_SCRIPT
        return run_oracle_batch([job], python=SGLANG_PYTHON, script=script, kept=KEPT_FIELDS)[0]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, jobs))


def golden_dirs(root: Path = GOLDEN_ROOT) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if (p / "steps.jsonl").is_file())


def scenarios(a: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]], SglangOracleOptions, Any]]:
    """``(name, rows, options, oracle steps or a spec still to run)`` per selected scenario."""
    if a.mode == "saved":
        return load_saved(Path(a.dir), a.only, SglangOracleOptions)
    if a.mode == "golden":
        out = []
        for d in golden_dirs():
            if not a.only or d.name in a.only:
                rows, opts, steps = load_golden(d)
                out.append((d.name, rows, opts, steps))
        return out
    if a.mode == "random":
        seeds = range(a.start_seed, a.start_seed + a.count)
        if a.family == "priority":
            specs = [priority_scenario(s, a.n) for s in seeds]
        else:
            forced = {"overlap": True, "no-overlap": False}.get(a.family)
            mixed = a.family == "mixed-chunk"
            specs = [random_scenario(s, a.n, forced, mixed) for s in seeds]
    else:
        specs = [s for s in GOLDEN + EXTRA + PRIORITY if not a.only or s.name in a.only]
    return [(s.name, make_trace(s), s.options, s) for s in specs]


def run_one(
    name: str,
    rows: list[dict[str, Any]],
    opts: SglangOracleOptions,
    oracle_steps: list[dict[str, Any]],
    a: argparse.Namespace,
    settings: dict[str, Any],
) -> tuple[Comparison, float]:
    t0 = time.perf_counter()
    mine = run_servesim(build_engine(_rank_class(), opts, settings), rows, opts)
    wall = time.perf_counter() - t0
    if a.save:
        save_scenario(a.save, name, rows, opts, oracle_steps, mine)
    fields = [f for f in COMPARED_FIELDS if f not in (a.ignore_fields or [])]
    return compare_steps(oracle_steps, mine, fields=fields), wall


def _rank_class() -> type:
    from servesim.plugins import Plugins

    return Plugins().backends().get("sglang")


def is_spec(src: Any) -> bool:
    return isinstance(src, ScenarioSpec)
