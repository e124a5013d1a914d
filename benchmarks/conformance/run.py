"""Step-by-step conformance runner: servesim's ``vllm`` rank against vLLM 0.32's scheduler.

    # the checked-in golden scenarios (no vLLM needed)
    python benchmarks/conformance/run.py golden --profile vllm-0.32
    # fresh random 300-request scenarios, run through the oracle too
    python benchmarks/conformance/run.py random --count 10 --start-seed 0 --profile vllm-0.32
    # small chunked-prefill-off scenarios with tight budgets and pools
    python benchmarks/conformance/run.py random --family unchunked --count 500 --profile vllm-0.32
    # mixed random scenarios under --scheduling-policy priority
    python benchmarks/conformance/run.py random --family priority --count 100 --profile vllm-0.32
    # a golden scenario's spec re-run through the oracle
    python benchmarks/conformance/run.py oracle --only preempt_small_pool
    # servesim again against oracle logs kept earlier with --save DIR (no vLLM needed)
    python benchmarks/conformance/run.py saved --dir DIR --profile vllm-0.32

For every scenario it prints the identical-step percentage and, where the two logs part, the
first divergence with both sides' lines. ``--save DIR`` keeps both step logs per scenario.
Exit status 1 when a scenario is below ``--min-percent``.

``--emulate-null-block`` and ``--ignore-trailing-empty`` isolate the two structural vLLM
differences when the rank under test lacks the ``vllm-0.32`` settings: the first gives
servesim one block less (vLLM keeps one of ``num_gpu_blocks`` as its null block), the second
drops the oracle's final empty ``schedule()`` call.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle import (  # noqa: E402
    DEFAULT_PYTHON,
    VLLM033_PYTHON,
    load_saved,
    oracle_available,
    run_oracle_batch,
    save_scenario,
)
from scenarios import (  # noqa: E402
    GOLDEN,
    GOLDEN_033,
    priority_scenario,
    random_scenario,
    tiny_pool_scenario,
    unchunked_scenario,
)
from servesim.errors import SimError  # noqa: E402
from servesim_vllm.conformance import (  # noqa: E402
    COMPARED_FIELDS,
    Comparison,
    OracleOptions,
    ScenarioSpec,
    build_engine,
    compare_steps,
    golden_dirs,
    load_golden,
    make_trace,
    run_servesim,
)

GOLDEN_ROOT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "vllm_oracle"


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def backend_settings(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.profile:
        out["profile"] = a.profile
    for item in a.set or []:
        key, _, value = item.partition("=")
        out[key] = _parse_value(value)
    return out


def rank_class(name: str) -> type:
    from servesim.plugins import Plugins

    return Plugins().backends().get(name)


def run_one(
    name: str,
    rows: list[dict[str, Any]],
    opts: OracleOptions,
    oracle_steps: list[dict[str, Any]],
    a: argparse.Namespace,
) -> tuple[Comparison, float]:
    served = attrs.evolve(opts, num_gpu_blocks=opts.num_gpu_blocks - 1) if a.emulate_null_block else opts
    t0 = time.perf_counter()
    settings = {**backend_settings(a), **opts.backend_settings()}
    engine = build_engine(rank_class(a.backend), rows, served, settings)
    mine = run_servesim(engine, rows, opts)
    wall = time.perf_counter() - t0
    if a.save:
        save_scenario(a.save, name, rows, opts, oracle_steps, mine)
    if a.ignore_trailing_empty and oracle_steps and not oracle_steps[-1]["scheduled"]:
        oracle_steps = oracle_steps[:-1]
    fields = [f for f in COMPARED_FIELDS if f not in (a.ignore_fields or [])]
    return compare_steps(oracle_steps, mine, fields=fields), wall


def scenarios(a: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]], OracleOptions, Any]]:
    """``(name, rows, options, oracle steps or a spec still to run)`` per selected scenario."""
    if a.mode == "saved":
        return load_saved(Path(a.dir), a.only, OracleOptions)
    if a.mode == "golden":
        out = []
        root = GOLDEN_ROOT.parent / "vllm033_oracle" if a.vllm_version == "0.33" else GOLDEN_ROOT
        for d in golden_dirs(root):
            if a.only and d.name not in a.only:
                continue
            rows, opts, steps = load_golden(d)
            out.append((d.name, rows, opts, steps))
        return out
    specs: list[ScenarioSpec]
    if a.mode == "random":
        seeds = range(a.start_seed, a.start_seed + a.count)
        if a.family == "unchunked":
            specs = [unchunked_scenario(s) for s in seeds]
        elif a.family == "tinypool":
            specs = [tiny_pool_scenario(s) for s in seeds]
        elif a.family == "priority":
            specs = [priority_scenario(s, a.n) for s in seeds]
        else:
            specs = [random_scenario(s, a.n) for s in seeds]
    else:
        golden = GOLDEN_033 if a.vllm_version == "0.33" else GOLDEN
        specs = [s for s in golden if not a.only or s.name in a.only]
    return [(s.name, make_trace(s), s.options, s) for s in specs]


def _vllm_python(a: argparse.Namespace) -> Path:
    return VLLM033_PYTHON if a.vllm_version == "0.33" else DEFAULT_PYTHON


def _oracle_ready(a: argparse.Namespace, engine_mod: Any) -> bool:
    if engine_mod is not None:
        return bool(engine_mod.oracle_available())
    return oracle_available(python=_vllm_python(a))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["golden", "random", "oracle", "saved"])
    p.add_argument("--dir", default=None, help="with 'saved': a --save directory")
    p.add_argument("--only", nargs="*", default=None, help="scenario names (golden/oracle)")
    p.add_argument("--count", type=int, default=5, help="random scenarios")
    p.add_argument("--start-seed", type=int, default=0)
    p.add_argument("-n", type=int, default=300, help="requests per random scenario")
    p.add_argument("--family", choices=["mixed", "unchunked", "tinypool", "priority", "overlap",
                                        "no-overlap", "mixed-chunk"],
                   default="mixed",
                   help="random scenarios: mixed settings (300 requests), small chunked-off "
                        "ones, pools about the size of the largest request, or mixed ones under "
                        "the priority policy (vllm); with "
                        "--engine sglang, mixed, or every one with the overlap loop on "
                        "(ignore_eos on) or off, or priority: SGLang's priority scheduling, "
                        "the overlap loop on for half the seeds (use -n 40), or mixed-chunk: "
                        "the mixed settings with --enable-mixed-chunk (chunked prefill on)")
    p.add_argument("--engine", choices=["vllm", "sglang"], default="vllm",
                   help="sglang: servesim's sglang rank against SGLang 0.5.23's scheduler "
                        "(golden data in tests/golden/sglang_oracle)")
    p.add_argument("--vllm-version", choices=["0.32", "0.33"], default="0.32",
                   help="with --engine vllm: the oracle venv and golden set to use")
    p.add_argument("--backend", default="vllm")
    p.add_argument("--profile", default=None,
                   help="engine.<backend>.profile, e.g. vllm-0.32 or sglang-0.5.23")
    p.add_argument("--set", action="append", help="engine.<backend>.KEY=VALUE (JSON values)")
    p.add_argument("--emulate-null-block", action="store_true")
    p.add_argument("--ignore-trailing-empty", action="store_true")
    p.add_argument("--ignore-fields", nargs="*", default=None,
                   help="leave these step fields out of the comparison (e.g. free_blocks)")
    p.add_argument("--save", default=None, help="directory for both step logs per scenario")
    p.add_argument("--json", default=None, help="write the results table as JSON")
    p.add_argument("--min-percent", type=float, default=0.0)
    a = p.parse_args(argv)

    if a.engine == "sglang":
        import sglang_run as engine_mod
    else:
        engine_mod = None
    if a.mode in ("random", "oracle") and not _oracle_ready(a, engine_mod):
        print(f"the {a.engine} oracle venv is not installed (shared/tools/setup_*_oracle.sh)",
              file=sys.stderr)
        return 2
    results = []
    worst = 100.0
    print(f"{'scenario':24} {'steps':>6} {'same':>6} {'%':>8}  first divergence")
    todo = engine_mod.scenarios(a) if engine_mod else scenarios(a)
    pending = [(rows, opts) for _n, rows, opts, src in todo if isinstance(src, ScenarioSpec)]
    if not pending:
        oracle_runs = iter(())
    elif engine_mod:
        oracle_runs = iter(engine_mod.run_oracle(pending))
    else:
        oracle_runs = iter(run_oracle_batch(pending, python=_vllm_python(a)))
    for name, rows, opts, src in todo:
        aborted: list[str] = []
        if isinstance(src, ScenarioSpec):
            steps, summary = next(oracle_runs)
            aborted = list(summary.get("aborted", []) or summary.get("stuck", []))
        else:
            steps = src
        try:
            if engine_mod:
                cmp, wall = engine_mod.run_one(name, rows, opts, steps, a, backend_settings(a))
            else:
                cmp, wall = run_one(name, rows, opts, steps, a)
        except (TypeError, ValueError, SimError) as exc:  # e.g. a setting the rank lacks
            print(f"{name:24} error: {type(exc).__name__}: {exc}")
            worst = 0.0
            results.append({"scenario": name, "options": opts.to_json(), "error": str(exc)})
            continue
        worst = min(worst, cmp.percent)
        where = "-" if cmp.first_divergence is None else (
            f"step {cmp.first_divergence} ({', '.join(cmp.differing_fields)})")
        print(f"{name:24} {cmp.total:6d} {cmp.identical:6d} {cmp.percent:8.2f}  {where}")
        if cmp.first_divergence is not None:
            print(f"    oracle:   {json.dumps(cmp.oracle_line)}")
            print(f"    servesim: {json.dumps(cmp.servesim_line)}")
        if aborted:
            # vLLM deadlocked on a request that outgrew the pool; the oracle's harness gave up
            # (docs/conformance.md, difference 5).
            print(f"    oracle aborted stuck requests {', '.join(aborted)}")
        results.append({"scenario": name, "options": opts.to_json(), "steps": cmp.total,
                        "identical": cmp.identical, "percent": round(cmp.percent, 4),
                        "first_divergence": cmp.first_divergence,
                        "differing_fields": cmp.differing_fields,
                        "oracle_line": cmp.oracle_line, "servesim_line": cmp.servesim_line,
                        "servesim_wall_s": round(wall, 3), "oracle_aborted": aborted})
    total = sum(r.get("steps", 0) for r in results)
    same = sum(r.get("identical", 0) for r in results)
    if total:
        print(f"{'all':24} {total:6d} {same:6d} {100.0 * same / total:8.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    return 1 if worst < a.min_percent else 0


if __name__ == "__main__":
    sys.exit(main())
