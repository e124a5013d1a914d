#!/usr/bin/env python3
"""Where a silicon row's TTFT goes: servesim's per-request breakdown beside the measurement.

    python benchmarks/silicon_breakdown.py [--backend vllm] [--system h100_sxm]
        [--model Qwen/Qwen3-32B] [--source gap-analysis] [--max-concurrency 64]
        [--max-osl 1024] [--limit 200] [--jobs 2] [--timing '{type: overhead}']
        [--no-launch-options] [--csv out.csv]

Replays agg rows as benchmarks/silicon.py does and prints, per row, the measured and
predicted mean TTFT and TPOT, the mean TTFT of the first ``c`` requests (all sent at t = 0)
and of the rest, AIConfigurator's price of one request's prefill alone ("solo":
``predict_prefill_latency(1, 0.9 ISL, 0)``, the mean prompt of the ``[0.8 L, L]`` draw), the
measured TTFT in solos, and the TTFT servesim misses in measured decode steps
(``(measured - predicted) / measured TPOT``); then the medians per data source and backend.
docs/fidelity.md ("Where the error comes from") reads these. A benchmark: nothing is
asserted.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon  # noqa: E402
import silicon_rows  # noqa: E402

FIELDS = ("id", "source", "backend", "system", "model", "tp", "concurrency", "isl", "osl", "measured_ttft_ms",
          "servesim_ttft_ms", "first_c_ttft_ms", "rest_ttft_ms", "solo_prefill_ms", "measured_in_solos",
          "missed_decode_steps", "measured_tpot_ms", "servesim_tpot_ms")


def _solo_ms(row: silicon_rows.Row) -> float:
    import cattrs
    from servesim.config.engine import EngineConfig
    from servesim_aic.config import AicTimingConfig
    from servesim_aic.timing import AicTiming

    role = row.roles["agg"]
    aic = silicon_rows._timing(row, role, None)
    aic.pop("type")
    model = AicTiming(cattrs.structure(aic, AicTimingConfig), EngineConfig(backend=row.backend))
    mean_prompt = int((1 + silicon_rows.RANGE_RATIO) / 2 * row.isl)  # of the [0.8 L, L] draw
    return float(model.predict_prefill_ms(1, mean_prompt, 0))


def breakdown(job: tuple[dict[str, Any], dict[str, Any] | None, bool]) -> dict[str, Any] | None:
    import yaml
    from servesim.config.loader import load_config
    from servesim.errors import SimError
    from servesim.replay.runner import simulate

    raw, timing, launch = job
    row = silicon_rows.parse(raw)
    with tempfile.TemporaryDirectory() as tmp:
        client, run = os.path.join(tmp, "client.yaml"), os.path.join(tmp, "run.yaml")
        Path(client).write_text(yaml.safe_dump(silicon_rows.client_options(row, launch)))
        Path(run).write_text(yaml.safe_dump(silicon_rows.sim_config(row, client, timing, launch)))
        try:
            result = simulate(load_config(run))
            solo = _solo_ms(row)
        except (SimError, ValueError):
            return None
    log, c = result.log, row.concurrency
    ttft = [f - a for f, a in zip(log.first, log.arrival, strict=True) if f >= 0]
    pred_ttft, pred_tpot = float(result.report["mean_ttft_ms"]), float(result.report["mean_tpot_ms"])
    return {
        "id": row.id, "source": row.source, "backend": row.backend, "system": row.system, "model": row.model,
        "tp": row.roles["agg"].tp, "concurrency": c, "isl": row.isl, "osl": row.osl,
        "measured_ttft_ms": row.measured_ttft, "servesim_ttft_ms": pred_ttft,
        "first_c_ttft_ms": statistics.mean(ttft[:c]),
        "rest_ttft_ms": statistics.mean(ttft[c:]) if ttft[c:] else None,
        "solo_prefill_ms": solo, "measured_in_solos": row.measured_ttft / solo if solo > 0 else None,
        "missed_decode_steps": (row.measured_ttft - pred_ttft) / row.measured_tpot,
        "measured_tpot_ms": row.measured_tpot, "servesim_tpot_ms": pred_tpot,
    }


def summary(rows: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["source"], r["backend"])].append(r)
    out = [f"{'source':<14} {'backend':<8} {'rows':>5} {'TTFT err %':>11} {'TPOT err %':>11} "
           f"{'missed steps':>13} {'c=8 in solos':>13}"]
    for (source, backend), rs in sorted(groups.items()):
        def med(f: Any, rs: list[dict[str, Any]] = rs) -> float:
            vals = [v for r in rs if (v := f(r)) is not None]
            return statistics.median(vals) if vals else float("nan")
        c8 = med(lambda r: r["measured_in_solos"] if r["concurrency"] == 8 else None)
        out.append(f"{source:<14} {backend:<8} {len(rs):>5} "
                   f"{med(lambda r: 100 * (r['servesim_ttft_ms'] / r['measured_ttft_ms'] - 1)):>11.1f} "
                   f"{med(lambda r: 100 * (r['servesim_tpot_ms'] / r['measured_tpot_ms'] - 1)):>11.1f} "
                   f"{med(lambda r: r['missed_decode_steps']):>13.1f} {c8:>13.1f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", action="append")
    ap.add_argument("--system", action="append")
    ap.add_argument("--model", action="append")
    ap.add_argument("--source", choices=("inferencemax", "gap-analysis"))
    ap.add_argument("--max-concurrency", type=int, default=64)
    ap.add_argument("--max-osl", type=int, default=1024)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timing", default=None, help="YAML mapping of a timing model wrapping aic")
    ap.add_argument("--no-launch-options", action="store_true")
    ap.add_argument("--csv", help="write the per-row table here")
    a = ap.parse_args(argv)
    import yaml

    raws = silicon_rows.load_rows()
    if a.source:
        raws = [r for r in raws if silicon_rows.data_source(r) == a.source]
    a.mode, a.half = "agg", None
    rows, _, _ = silicon.select(raws, a)
    timing = yaml.safe_load(a.timing) if a.timing else None
    jobs = [(r, timing, not a.no_launch_options) for r in rows]
    with multiprocessing.get_context("spawn").Pool(max(1, a.jobs)) as pool:
        results = [r for r in pool.imap(breakdown, jobs, chunksize=1) if r is not None]
    for r in results:
        print(f"{r['id'][-60:]:<60} c={r['concurrency']:<4} isl={r['isl']:<5} "
              f"ttft {r['measured_ttft_ms']:8.0f} "
              f"pred {r['servesim_ttft_ms']:8.0f} (first c {r['first_c_ttft_ms']:7.0f}, rest "
              f"{r['rest_ttft_ms'] or 0:7.0f}) solo {r['solo_prefill_ms']:6.1f} missed steps "
              f"{r['missed_decode_steps']:6.1f}")
    print(summary(results))
    if a.csv:
        with open(a.csv, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, FIELDS)
            w.writeheader()
            w.writerows(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
