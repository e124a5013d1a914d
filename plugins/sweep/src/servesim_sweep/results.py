"""A sweep's records as a table: ``results.csv`` / ``results.parquet`` rows, the objectives
evaluated per configuration, and the table of the best points.

A row is one point: ``id, seed, status, error, gpus``, then its overrides (``set.<key>``), then
every report key but ``config`` (in each point's JSON) flattened with dots (``sla.ttft_ms``),
plus ``<key>_per_gpu`` for every throughput key. Lists are JSON text. With several seeds
the objectives and the Pareto front use each configuration's mean over its completed seeds.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen
from servesim.config.output_paths import replacing
from servesim.errors import UserError

from servesim_sweep.spec import Objectives

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig

META = ("id", "seed", "status", "error", "gpus")


def flat_report(report: dict[str, Any], gpus: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k in sorted(value):
                walk(f"{prefix}.{k}" if prefix else k, value[k])
        elif isinstance(value, list):
            out[prefix] = json.dumps(value)
        else:
            out[prefix] = value

    walk("", {k: v for k, v in report.items() if k != "config"})
    for key, value in list(out.items()):
        if key.endswith("throughput") and isinstance(value, (int, float)) and gpus:
            out[f"{key}_per_gpu"] = value / gpus
    return out


def rows(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """``(columns, rows)`` in point order."""
    set_keys = sorted({k for r in records for k in r["overrides"]})
    out: list[dict[str, Any]] = []
    report_keys: set[str] = set()
    for r in records:
        row: dict[str, Any] = {k: r[k] for k in META}
        for k in set_keys:
            value = r["overrides"].get(k)
            row[f"set.{k}"] = json.dumps(value) if isinstance(value, (list, dict)) else value
        if r["report"] is not None:
            flat = flat_report(r["report"], r["gpus"])
            report_keys.update(flat)
            row.update(flat)
        out.append(row)
    columns = [*META, *(f"set.{k}" for k in set_keys), *sorted(report_keys)]
    return columns, out


def write_csv(path: str, columns: list[str], table: list[dict[str, Any]]) -> None:
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in table:
            writer.writerow(["" if row.get(c) is None else row[c] for c in columns])


def _arrow_column(values: list[Any]) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.bool_())
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.int64())
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    return pa.array([None if v is None else (v if isinstance(v, str) else json.dumps(v))
                     for v in values], type=pa.string())


def write_parquet(path: str, columns: list[str], table: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    arrays = {c: _arrow_column([row.get(c) for row in table]) for c in columns}
    with replacing(path) as tmp:
        pq.write_table(pa.table(arrays), tmp)


def metric(record: dict[str, Any], key: str) -> float | None:
    """A numeric report key (dotted for nested ones), ``<key>_per_gpu`` or ``gpus``."""
    if record["report"] is None:
        return None
    if key == "gpus":
        return float(record["gpus"])
    value = flat_report(record["report"], record["gpus"]).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@frozen
class Config:
    """One configuration (its overrides) over its seeds: mean metrics of completed seeds."""

    label: str
    ids: tuple[str, ...]
    values: dict[str, float]
    feasible: bool


def evaluate(records: Sequence[dict[str, Any]], labels: Sequence[str], objectives: Objectives,
             extra: Sequence[str] = ()) -> list[Config]:
    """Group records by overrides (in order); each group's mean of the objective, the
    constraints' keys and ``extra``; feasible when every constraint holds on the means."""
    keys = list(dict.fromkeys([objectives.key, *(c.key for c in objectives.constraints), *extra,
                               "gpus"]))
    groups: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for record, label in zip(records, labels, strict=True):
        groups.setdefault(json.dumps(record["overrides"], sort_keys=True), []).append(
            (record, label))
    out = []
    for members in groups.values():
        ok = [r for r, _label in members if r["status"] == "ok"]
        values = {}
        for key in keys:
            got = [v for v in (metric(r, key) for r in ok) if v is not None]
            if got:
                values[key] = math.fsum(got) / len(got)
        feasible = bool(ok) and all(c.key in values and c.holds(values[c.key])
                                    for c in objectives.constraints)
        label = members[0][1].split(" (seed")[0]
        out.append(Config(label, tuple(r["id"] for r, _l in members), values, feasible))
    return out


def known_keys(loaded: Sequence[LoadedConfig]) -> tuple[frozenset[str], bool]:
    """The numeric keys some point's report will hold (report_keys, plus ``gpus`` and
    ``<key>_per_gpu`` for every throughput key), and whether an installed plugin may add
    more (``servesim_report_extra``: its keys are known only after a run)."""
    from servesim.replay.observers import Observers
    from servesim.report.keys import report_keys

    keys: set[str] = {"gpus"}
    for config in loaded:
        keys.update(report_keys(config))
    keys.update([f"{k}_per_gpu" for k in keys if k.endswith("throughput")])
    observers = Observers.of(loaded[0].plugins) if loaded else None
    extra = observers is not None and observers.adds_report_keys
    return frozenset(keys), extra


def check_known_keys(known: frozenset[str], open_ended: bool, objectives: Objectives, source: str,
                     pareto: Sequence[tuple[str, str]] = ()) -> None:
    """Before any point runs: an objective, constraint or Pareto-axis key that no point's
    report will hold is a sweep-file error listing the valid keys. With a plugin that adds
    report keys installed (``open_ended``), an unknown key waits for :func:`check_keys`."""
    if open_ended:
        return
    from servesim.config.converter import unknown_key_message
    from servesim.errors import ConfigError

    valid = sorted(known)
    for path, key in _checked(objectives, pareto):
        if key not in known:
            message = unknown_key_message(key, valid).replace(
                "unknown key", f"no point reports a numeric {key!r}", 1)
            raise ConfigError(message, path=path, source=source)


def _checked(objectives: Objectives, pareto: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    sense = "maximize" if objectives.sense > 0 else "minimize"
    return [(f"objectives.{sense}", objectives.key),
            *((f"objectives.subject_to[{i}]", c.key) for i, c in enumerate(objectives.constraints)),
            *pareto]


def check_keys(configs: Sequence[Config], objectives: Objectives, source: str,
               pareto: Sequence[tuple[str, str]] = ()) -> None:
    """An objective, constraint or Pareto-axis key no completed point reports is a
    sweep-file error (``pareto`` lists ``(key path, key)`` of the axes the file named)."""
    if not any(c.values for c in configs):
        return  # nothing completed: the failures say why
    for path, key in _checked(objectives, pareto):
        if not any(key in c.values for c in configs):
            from servesim.errors import ConfigError

            raise ConfigError(f"no completed point reports a numeric {key!r}", path=path,
                              source=source)


def best(configs: Sequence[Config], objectives: Objectives, n: int = 10) -> list[Config]:
    """The feasible configurations, best first (ties keep sweep order)."""
    feasible = [c for c in configs if c.feasible and objectives.key in c.values]
    return sorted(feasible, key=lambda c: -objectives.sense * c.values[objectives.key])[:n]


def best_table(configs: Sequence[Config], objectives: Objectives, total: int) -> Any:
    """A rich table of :func:`best` (rendered by the caller)."""
    from rich.table import Table

    keys = list(dict.fromkeys([objectives.key, *(c.key for c in objectives.constraints), "gpus"]))
    goal = "max" if objectives.sense > 0 else "min"
    rule = "; ".join(str(c) for c in objectives.constraints) or "no constraints"
    table = Table(title=f"Best of {total} configurations: {goal} {objectives.key} ({rule})")
    table.add_column("#", justify="right")
    table.add_column("configuration")
    for key in keys:
        table.add_column(key, justify="right")
    for i, c in enumerate(best(configs, objectives), 1):
        table.add_row(str(i), c.label, *(_cell(c.values.get(k)) for k in keys))
    return table


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{int(value):,}" if value.is_integer() else f"{value:,.2f}"


def ensure_rows(records: Sequence[dict[str, Any] | None]) -> list[dict[str, Any]]:
    missing = [i for i, r in enumerate(records) if r is None]
    if missing:
        raise UserError(f"internal: {len(missing)} sweep points have no record")
    return [r for r in records if r is not None]
