#!/usr/bin/env python3
"""Replay AIConfigurator's measured silicon rows and compare servesim's predicted mean TTFT
and TPOT (and aiconfigurator's own estimate) with what the GPUs measured.

    python benchmarks/silicon.py [--backend vllm] [--system h100_sxm] [--mode agg]
        [--model Qwen/Qwen3-32B] [--max-concurrency 256] [--limit 40] [--jobs 2]
        [--timing '{type: overhead}'] [--no-peer] [--no-launch-options] [--out silicon-out]
        [--executor pool|local|ray] [--address HOST:PORT]

Each row is replayed with its backend, system, model, precision and per-role parallelism under
its client's load (the InferenceMAX client's, or AIConfigurator's own for its gap-analysis
runs) and with its launch settings (benchmarks/silicon_rows.py). Writes ``rows.csv`` (one line per
row: measured, servesim, aiconfigurator), ``scatter.png`` and ``summary.md`` under ``--out``
and prints MAPE and signed bias by backend x system x mode, and the coverage. ``--timing``
wraps the ``aic`` model in another timing model (its ``inner``), e.g. the ``overhead`` model.
The rows run in a process pool here (``--executor pool``, ``--jobs`` at once), or as the
points of one ``servesim sweep`` on its ``local`` or ``ray`` executor (benchmarks/silicon_sweep.py:
``--address`` names a Ray cluster, else the sweep starts a local one); both give the same rows.
It is a benchmark: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import silicon_peer  # noqa: E402
import silicon_report  # noqa: E402
import silicon_rows  # noqa: E402
import silicon_sweep  # noqa: E402

FIELDS = ("id", "group", "half", "source", "backend", "version", "model", "system", "mode", "isl", "osl", "concurrency",
          "measured_ttft_ms", "measured_tpot_ms", "servesim_ttft_ms", "servesim_tpot_ms", "aic_ttft_ms",
          "aic_tpot_ms", "servesim_problem", "aic_problem", "sim_s")


def _replay(row: silicon_rows.Row, timing: dict[str, Any] | None,
            launch: bool = True) -> tuple[float, float] | str:
    import yaml

    from servesim.errors import SimError
    from servesim.replay.runner import simulate

    with tempfile.TemporaryDirectory() as tmp:
        client = os.path.join(tmp, "client.yaml")
        Path(client).write_text(yaml.safe_dump(silicon_rows.client_options(row, launch)))
        try:
            _cfg, loaded = silicon_sweep.row_config(row, client, timing, launch)
            report = simulate(loaded).report
        except (SimError, ValueError) as exc:
            return silicon_sweep.problem_text(exc)
    return float(report["mean_ttft_ms"]), float(report["mean_tpot_ms"])


def peer_estimate(raw: dict[str, Any]) -> dict[str, Any]:
    """aiconfigurator's own estimate of the row: its ``aic_*`` columns."""
    from servesim_aic import catalog

    row = silicon_rows.parse(raw)
    est = silicon_peer.estimate(row, catalog.resolve_version(row.system, row.backend, None))
    if isinstance(est, str):
        return {"aic_problem": est}
    return {"aic_ttft_ms": est[0], "aic_tpot_ms": est[1]}


def base_columns(row: silicon_rows.Row) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(row, k, None) for k in FIELDS}
    out.update(group=row.group, measured_ttft_ms=row.measured_ttft, measured_tpot_ms=row.measured_tpot)
    return out


def run_row(job: tuple[dict[str, Any], dict[str, Any] | None, bool, bool]) -> dict[str, Any]:
    raw, timing, peer, launch = job
    row = silicon_rows.parse(raw)
    out = base_columns(row)
    t0 = time.perf_counter()
    got = _replay(row, timing, launch)
    out["sim_s"] = round(time.perf_counter() - t0, 2)
    if isinstance(got, str):
        out["servesim_problem"] = got
    else:
        out["servesim_ttft_ms"], out["servesim_tpot_ms"] = got
    if peer:
        out.update(peer_estimate(raw))
    return out


def run_pooled(rows: list[dict[str, Any]], timing: dict[str, Any] | None, peer: bool, launch: bool,
               jobs: int) -> list[dict[str, Any]]:
    """The rows replayed in a process pool here, with progress."""
    work = [(r, timing, peer, launch) for r in rows]
    t0 = time.perf_counter()
    results = []
    with multiprocessing.get_context("spawn").Pool(max(1, jobs)) as pool:
        for i, res in enumerate(pool.imap(run_row, work, chunksize=1), 1):
            results.append(res)
            if i % 10 == 0 or i == len(work):
                print(f"  {i}/{len(work)} rows, {time.perf_counter() - t0:.0f} s", flush=True)
    return results


def run_swept(rows: list[dict[str, Any]], timing: dict[str, Any] | None, peer: bool, launch: bool,
              a: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows replayed as the points of one ``servesim sweep`` (silicon_sweep), the peer's
    estimates beside them in a process pool."""
    parsed = [silicon_rows.parse(r) for r in rows]
    t0 = time.perf_counter()
    got = silicon_sweep.sweep_rows(parsed, timing, launch, a.executor, a.jobs, Path(a.out), a.address)
    print(f"  {len(parsed)} rows swept, {time.perf_counter() - t0:.0f} s", flush=True)
    results = []
    for row in parsed:
        out = base_columns(row)
        res = got.get(row.id, "no record from the sweep")
        if isinstance(res, str):
            out["servesim_problem"] = res
        else:
            out["servesim_ttft_ms"], out["servesim_tpot_ms"] = res
        results.append(out)
    if peer:
        with multiprocessing.get_context("spawn").Pool(max(1, a.jobs)) as pool:
            for out, est in zip(results, pool.imap(peer_estimate, rows, chunksize=1), strict=True):
                out.update(est)
    return results


def select(rows: list[dict[str, Any]], a: argparse.Namespace) -> tuple[list[dict[str, Any]], int, int]:
    """(rows to replay, rows servesim can express, all rows)."""
    parsed = [(r, silicon_rows.parse(r)) for r in rows]
    expressible = [(r, p) for r, p in parsed if p.problem is None]
    n_expressible = len(expressible)
    if a.half:
        fit, held = silicon_rows.model_halves(rows)
        half = fit if a.half == "fit" else held
        expressible = [(r, p) for r, p in expressible if p.model in half]
    keep = [(r, p) for r, p in expressible
            if (not a.backend or p.backend in a.backend) and (not a.system or p.system in a.system)
            and (not a.mode or p.mode == a.mode) and (not a.model or p.model in a.model)
            and p.concurrency <= a.max_concurrency and p.osl <= a.max_osl]
    keep.sort(key=lambda rp: rp[1].id)
    if a.limit and len(keep) > a.limit:  # evenly spaced, so a subset still spans the groups
        step = len(keep) / a.limit
        keep = [keep[int(i * step)] for i in range(a.limit)]
    return [r for r, _ in keep], n_expressible, len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", action="append", help="vllm, sglang or trtllm (repeatable)")
    ap.add_argument("--system", action="append", help="e.g. h100_sxm (repeatable)")
    ap.add_argument("--model", action="append", help="AIConfigurator model id (repeatable)")
    ap.add_argument("--mode", choices=("agg", "disagg"))
    ap.add_argument("--half", choices=("fit", "held"), help="only the fitting or the held-out half of the models")
    ap.add_argument("--max-concurrency", type=int, default=256, help="skip rows above (replay cost)")
    ap.add_argument("--max-osl", type=int, default=8192, help="skip rows with longer outputs (replay cost)")
    ap.add_argument("--limit", type=int, default=0, help="replay at most this many rows, evenly spaced")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timing", default=None, help="YAML mapping of a timing model wrapping aic")
    ap.add_argument("--no-peer", action="store_true", help="skip aiconfigurator's own estimate")
    ap.add_argument("--no-launch-options", action="store_true",
                    help="leave out the launch scripts' and AIConfigurator's generator's settings and "
                         "replay every row under the InferenceMAX client (silicon_rows)")
    ap.add_argument("--executor", choices=("pool", "local", "ray"), default="pool",
                    help="pool: a process pool here (default); local or ray: every row a point of "
                         "one servesim sweep on that executor (docs/sweep.md)")
    ap.add_argument("--address", default=None, help="with --executor ray: the Ray cluster (host:port)")
    ap.add_argument("--out", default="silicon-out")
    a = ap.parse_args(argv)
    if a.address and a.executor != "ray":
        ap.error("--address needs --executor ray")
    import yaml

    timing = yaml.safe_load(a.timing) if a.timing else None
    peer = not a.no_peer and silicon_peer.available()
    if not a.no_peer and not peer:
        print("aiconfigurator is not installed: no peer estimates (pip install aiconfigurator==0.12.0)")
    rows, n_expr, n_all = select(silicon_rows.load_rows(), a)
    print(f"coverage: {n_expr}/{n_all} rows expressible; replaying {len(rows)}")
    launch = not a.no_launch_options
    if a.executor == "pool":
        results = run_pooled(rows, timing, peer, launch, a.jobs)
    else:
        results = run_swept(rows, timing, peer, launch, a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    fit, _ = silicon_rows.model_halves(silicon_rows.load_rows())
    for r in results:
        r["half"] = "fit" if r["model"] in fit else "held"
    with open(out / "rows.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(results)
    silicon_report.summarize(results, out, n_expr, n_all)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
