"""Silicon rows replayed through ``servesim sweep``: one sweep point per row, on the sweep's
executor (``local`` processes or ``ray`` tasks, docs/sweep.md).

Each row's configuration (:func:`silicon_rows.sim_config`) becomes the point's overrides of
whole sections (``engine``, ``cluster``, ``workload``) over an empty base; its client file goes
to ``OUT/sweep/clients/<row id>.yaml``, which names the point's record again afterwards. The
pool a row's run completed with is settled before the sweep, as :func:`row_config` settles it
for a replay in this process: the sweep loads every point before it runs any, and one point's
config error would stop it. On a Ray cluster (``--address``) every node must see ``OUT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import silicon_rows

KV_SIZING = "cannot size the KV pool"


def row_config(row: silicon_rows.Row, client: str, timing: dict[str, Any] | None,
               launch: bool) -> tuple[dict[str, Any], Any]:
    """The row's configuration, with the pool sized for its load when AIConfigurator's memory
    estimate leaves no room for a KV cache: the run completed on the GPUs, so that estimate is
    too high for it (:func:`silicon_rows._blocks_for_load`). Returns it and its loaded form;
    a config problem of another kind raises."""
    from servesim.config.loader import load_config
    from servesim.errors import ConfigError

    cfg = silicon_rows.sim_config(row, client, timing, launch)
    try:
        return cfg, load_config(None, as_sets(cfg))
    except ConfigError as exc:
        if KV_SIZING not in str(exc):
            raise
    cfg = silicon_rows.sim_config(row, client, timing, launch, kv_fallback=True)
    return cfg, load_config(None, as_sets(cfg))


def as_sets(cfg: dict[str, Any]) -> list[str]:
    """``cfg``'s sections as ``--set`` items, as the sweep applies a point's overrides."""
    return [f"{key}={json.dumps(value)}" for key, value in cfg.items()]


def problem_text(exc: BaseException) -> str:
    """One line for a row's ``*_problem`` column."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]


def sweep_rows(rows: list[silicon_rows.Row], timing: dict[str, Any] | None, launch: bool,
               executor: str, jobs: int, out: Path, address: str | None = None
               ) -> dict[str, tuple[float, float] | str]:
    """Each row's (mean TTFT, mean TPOT) in ms, or the problem that kept it from a result."""
    from servesim.errors import SimError

    where = (out / "sweep").resolve()
    clients = where / "clients"
    clients.mkdir(parents=True, exist_ok=True)
    results: dict[str, tuple[float, float] | str] = {}
    points = []
    for row in rows:
        client = clients / f"{row.id}.yaml"
        client.write_text(yaml.safe_dump(silicon_rows.client_options(row, launch)), encoding="utf-8")
        try:
            points.append(row_config(row, str(client), timing, launch)[0])
        except (SimError, ValueError) as exc:
            results[row.id] = problem_text(exc)
    spec = where / "silicon-sweep.yaml"
    spec.write_text(yaml.safe_dump({"base": {}, "points": points}, sort_keys=True), encoding="utf-8")
    cmd = [sys.executable, "-m", "servesim.cli.main", "sweep", str(spec), "--executor", executor,
           "--parallel", str(max(1, jobs)), "--out", str(where / "out")]
    if address:
        cmd += ["--address", address]
    if points:
        done = subprocess.run(cmd, check=False)
        if done.returncode not in (0, 1):  # 1: every point failed, and each says why
            raise SystemExit(f"servesim sweep exited with status {done.returncode}")
    results.update(read_points(where / "out" / "points"))
    return results


def read_points(points: Path) -> dict[str, tuple[float, float] | str]:
    """Row id -> result from a sweep's point records (named by the client file each point
    replays)."""
    out: dict[str, tuple[float, float] | str] = {}
    for path in sorted(points.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        client = dict(record["overrides"])["workload"]["trace"]["path"]
        row_id = os.path.splitext(os.path.basename(client))[0]
        if record["status"] == "ok":
            report = record["report"]
            out[row_id] = (float(report["mean_ttft_ms"]), float(report["mean_tpot_ms"]))
        else:
            out[row_id] = str(record["error"] or "failed").splitlines()[0][:200]
    return out
