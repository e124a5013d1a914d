"""The sweep file (docs/sweep.md) and the points it expands to.

::

    base: base.yaml            # a config file (relative to the sweep file) or an inline config
    grid:                      # key path -> values; the cross product, in key order
      engine.max_num_seqs: [64, 128]
    points:                    # explicit overrides, besides (or instead of) the grid
      - {cluster.prefill_workers: 1, cluster.decode_workers: 3}
    seeds: [1, 2]              # each point once per seed (workload.seed); default: the base's
    objectives:
      maximize: output_throughput_per_gpu     # or minimize:
      subject_to: ["p99_ttft_ms <= 500"]
    pareto: {x: p99_ttft_ms, y: output_throughput_per_gpu}   # optional; by default x is
                               # the first constraint on a *_ms key, y the objective

Every problem is a :class:`~servesim.errors.ConfigError` naming the sweep file and the key
path (``grid.engine.max_num_seqs``, ``points[1]``, ``objectives.subject_to[0]``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from attrs import frozen
from servesim.config.yaml_io import read_yaml
from servesim.errors import ConfigError

KEYS = ("base", "grid", "points", "seeds", "objectives", "pareto")
OPS = ("<=", ">=", "==", "<", ">")
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|<|>)\s*(-?[\d.]+(?:[eE][-+]?\d+)?)\s*$")


@frozen
class Constraint:
    key: str
    op: str
    bound: float

    def holds(self, value: float) -> bool:
        return {"<=": value <= self.bound, ">=": value >= self.bound, "==": value == self.bound,
                "<": value < self.bound, ">": value > self.bound}[self.op]

    def __str__(self) -> str:
        return f"{self.key} {self.op} {self.bound:g}"


@frozen
class Objectives:
    """Maximise (``sense`` 1) or minimise (-1) ``key`` subject to ``constraints``."""

    key: str = "output_throughput_per_gpu"
    sense: int = 1
    constraints: tuple[Constraint, ...] = ()


@frozen
class Point:
    """One run: the overrides (key path -> value) and the seed (None: the base's)."""

    overrides: tuple[tuple[str, Any], ...]
    seed: int | None

    @property
    def id(self) -> str:
        """Stable across expansions (resume): a hash of the overrides and seed."""
        text = json.dumps({"overrides": list(self.overrides), "seed": self.seed}, sort_keys=True)
        return "p" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def sets(self) -> list[str]:
        """The overrides as ``--set`` items (JSON values are YAML)."""
        out = [f"{k}={json.dumps(v)}" for k, v in self.overrides]
        if self.seed is not None:
            out.append(f"workload.seed={self.seed}")
        return out

    def label(self) -> str:
        text = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.overrides) or "base"
        return text if self.seed is None else f"{text} (seed {self.seed})"


@frozen
class Sweep:
    source: str
    base: str | dict[str, Any]
    points: tuple[Point, ...]
    objectives: Objectives
    pareto_x: str
    pareto_y: str
    #: Where each point's overrides came from (``grid`` or ``points[i]``), by point index.
    origins: tuple[str, ...] = ()
    #: The Pareto axes the file named, as ``(key path, report key)`` (checked once points ran).
    pareto_given: tuple[tuple[str, str], ...] = ()


def _err(message: str, path: str, source: str) -> ConfigError:
    return ConfigError(message, path=path, source=source)


def _key_path(key: Any, path: str, source: str) -> str:
    if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][\w]*(\.[\w]+)*", key):
        raise _err(f"expected a dotted config key like engine.max_num_seqs, got {key!r}",
                   path, source)
    return key


def _grid(raw: Any, source: str) -> list[tuple[tuple[str, Any], ...]]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping) or not raw:
        raise _err("expected a mapping of key paths to lists of values", "grid", source)
    axes = []
    for key, values in raw.items():
        _key_path(key, f"grid.{key}", source)
        if not isinstance(values, list) or not values:
            raise _err(f"expected a non-empty list of values, got {values!r}", f"grid.{key}",
                       source)
        axes.append([(key, v) for v in values])
    return [tuple(combo) for combo in itertools.product(*axes)]


def _points(raw: Any, source: str) -> list[tuple[tuple[str, Any], ...]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _err("expected a list of mappings of key paths to values", "points", source)
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise _err(f"expected a mapping of key paths to values, got {item!r}",
                       f"points[{i}]", source)
        out.append(tuple((_key_path(k, f"points[{i}].{k}", source), v) for k, v in item.items()))
    return out


def _seeds(raw: Any, source: str) -> list[int | None]:
    if raw is None:
        return [None]
    if not isinstance(raw, list) or not raw or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in raw):
        raise _err(f"expected a non-empty list of integers, got {raw!r}", "seeds", source)
    for i, seed in enumerate(raw):
        if seed < 0:
            raise _err(f"expected an integer >= 0 (workload.seed), got {seed}", f"seeds[{i}]", source)
    if len(set(raw)) != len(raw):
        raise _err(f"seeds repeat: {raw!r}", "seeds", source)
    return list(raw)


def _objectives(raw: Any, source: str) -> Objectives:
    if raw is None:
        return Objectives()
    if not isinstance(raw, Mapping):
        raise _err("expected a mapping with maximize: or minimize: and subject_to:",
                   "objectives", source)
    unknown = sorted(set(raw) - {"maximize", "minimize", "subject_to"})
    if unknown:
        raise _err("unknown key; expected maximize, minimize or subject_to",
                   f"objectives.{unknown[0]}", source)
    if ("maximize" in raw) == ("minimize" in raw):
        raise _err("give exactly one of maximize: or minimize:", "objectives", source)
    name = "maximize" if "maximize" in raw else "minimize"
    key = raw[name]
    if not isinstance(key, str) or not key:
        raise _err(f"expected a report key, got {key!r}", f"objectives.{name}", source)
    items = raw.get("subject_to") or []
    if not isinstance(items, list):
        raise _err("expected a list like ['p99_ttft_ms <= 500']", "objectives.subject_to", source)
    constraints = []
    for i, item in enumerate(items):
        m = _CONSTRAINT.match(item) if isinstance(item, str) else None
        if m is None:
            raise _err(f"expected 'KEY OP NUMBER' with OP one of {', '.join(OPS)}, got {item!r}",
                       f"objectives.subject_to[{i}]", source)
        constraints.append(Constraint(m.group(1), m.group(2), float(m.group(3))))
    return Objectives(key, 1 if name == "maximize" else -1, tuple(constraints))


def _pareto(raw: Any, objectives: Objectives, source: str) -> tuple[str, str]:
    latency = [c.key for c in objectives.constraints if c.key.endswith("_ms")]
    x = latency[0] if latency else "p99_ttft_ms"
    y = objectives.key
    if raw is None:
        return x, y
    if not isinstance(raw, Mapping) or set(raw) - {"x", "y"}:
        raise _err("expected {x: REPORT_KEY, y: REPORT_KEY}", "pareto", source)
    for axis in ("x", "y"):
        if axis in raw and not isinstance(raw[axis], str):
            raise _err(f"expected a report key, got {raw[axis]!r}", f"pareto.{axis}", source)
    return raw.get("x", x), raw.get("y", y)


def load_sweep(path: str) -> Sweep:
    """Read and check a sweep file; the points in order: grid (cross product), then
    ``points:``, each repeated over ``seeds:``."""
    raw = read_yaml(path)
    if not isinstance(raw, Mapping):
        raise _err(f"expected a mapping with {', '.join(KEYS)}", "", path)
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise _err(f"unknown key; expected one of {', '.join(KEYS)}", unknown[0], path)
    base = raw.get("base")
    if isinstance(base, str):
        base = os.path.join(os.path.dirname(os.path.abspath(path)), base)
        if not os.path.isfile(base):
            raise _err(f"no such config file {raw['base']!r}", "base", path)
    elif base is None:
        base = {}
    elif not isinstance(base, Mapping):
        raise _err("expected a config file path or an inline config mapping", "base", path)
    grid, explicit = _grid(raw.get("grid"), path), _points(raw.get("points"), path)
    combos = [(c, "grid") for c in grid] + [(c, f"points[{i}]") for i, c in enumerate(explicit)]
    if not combos:
        combos = [((), "base")]
    seeds = _seeds(raw.get("seeds"), path)
    points, origins, seen = [], [], set()
    for overrides, origin in combos:
        for seed in seeds:
            point = Point(overrides, seed)
            if point.id in seen:
                continue  # a point also listed in the grid runs once
            seen.add(point.id)
            points.append(point)
            origins.append(origin)
    objectives = _objectives(raw.get("objectives"), path)
    x, y = _pareto(raw.get("pareto"), objectives, path)
    given = raw.get("pareto") or {}
    named = tuple((f"pareto.{axis}", given[axis]) for axis in ("x", "y") if axis in given)
    return Sweep(path, base if isinstance(base, str) else dict(base), tuple(points), objectives,
                 x, y, tuple(origins), named)
