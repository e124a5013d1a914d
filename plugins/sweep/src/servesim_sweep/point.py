"""One sweep point: its configuration checked before the sweep, then run in a worker process
(local or Ray) to a record the parent writes.

A record is plain JSON data: ``{"id", "seed", "overrides", "status": "ok" | "failed", "error",
"gpus", "report"}``; it holds no wall-clock value, so every executor writes the same bytes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError

from servesim_sweep.spec import Point, Sweep

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig


def gpus_of(resolved: dict[str, Any]) -> int:
    """GPUs of a resolved config: per worker tensor parallel (the timing model's ``tp`` or
    ``tp_size``, 1 without one) times ``dp_size``, summed over the workers (each role's
    ``cluster.prefill_engine``/``decode_engine`` overrides apply in a prefill/decode split)."""
    engine, cluster = resolved["engine"], resolved["cluster"]

    def per_worker(over: dict[str, Any] | None) -> int:
        over = over or {}
        timing = {**(engine.get("timing_model") or {}), **(over.get("timing_model") or {})}
        tp = timing.get("tp") or timing.get("tp_size") or 1
        return int(tp) * int(over.get("dp_size", engine.get("dp_size", 1)))

    if cluster.get("prefill_workers") or cluster.get("decode_workers"):
        return (cluster["prefill_workers"] * per_worker(cluster.get("prefill_engine"))
                + cluster["decode_workers"] * per_worker(cluster.get("decode_engine")))
    return int(cluster["workers"]) * per_worker(None)


def base_path(sweep: Sweep, out_dir: str) -> str:
    """The base config's file: the sweep's own, or the inline one written to DIR/base.yaml."""
    if isinstance(sweep.base, str):
        return sweep.base
    import yaml  # type: ignore[import-untyped]

    path = os.path.join(out_dir, "base.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(sweep.base, fh, sort_keys=True)
    return path


def _body(exc: ConfigError) -> str:
    text = str(exc)
    for prefix in (f"{exc.source}: " if exc.source else None, f"{exc.path}: " if exc.path else None):
        if prefix and text.startswith(prefix):
            text = text[len(prefix):]
    return text


def check_points(sweep: Sweep, base: str) -> list[LoadedConfig]:
    """Load every point's configuration (no run), in point order; an error names the sweep
    file and the override's key path (``grid.engine.max_num_seqs``,
    ``points[2].cluster.workers``), or ``base.<key>`` for an inline base."""
    from servesim.config.loader import load_config
    from servesim.plugins import Plugins

    plugins = Plugins()
    loaded = []
    for point, origin in zip(sweep.points, sweep.origins, strict=True):
        try:
            loaded.append(load_config(base, point.sets(), plugins))
        except ConfigError as exc:
            raise _located(exc, point, origin, sweep, base) from None
    return loaded


def _located(exc: ConfigError, point: Point, origin: str, sweep: Sweep, base: str) -> ConfigError:
    where = exc.path or ""
    for key, _value in point.overrides:
        if where == key or where.startswith(key + ".") or key.startswith(where + ".") and where:
            return ConfigError(f"{_body(exc)} (point {point.label()})", path=f"{origin}.{key}",
                               source=sweep.source)
    if exc.source == base and not isinstance(sweep.base, str):
        return ConfigError(_body(exc), path=f"base.{where}" if where else "base",
                           source=sweep.source)
    return exc


def new_record(point: Point, error: BaseException | None = None) -> dict[str, Any]:
    """A point's record: empty, or failed with ``error``."""
    return {"id": point.id, "seed": point.seed, "overrides": dict(point.overrides),
            "status": "ok" if error is None else "failed",
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "gpus": None, "report": None}


def run_point(base: str, point: Point) -> dict[str, Any]:
    """Replay one point (in a worker process); any failure becomes a failed record."""
    record = new_record(point)
    try:
        from servesim.config.loader import load_config
        from servesim.replay.runner import simulate

        loaded = load_config(base, point.sets())
        resolved = loaded.resolved()
        record["gpus"] = gpus_of(resolved)
        record["report"] = simulate(loaded).report
    except Exception as exc:  # noqa: BLE001 - a failed point is data, not the sweep's end
        return new_record(point, exc)
    return record
