"""Figure data from saved files (``servesim plot``): a report JSON, the per-request JSONL
(docs/report.md) and forward-pass metrics as JSON lines.

FPM lines come in two shapes, told apart per line:

* servesim's flat JSONL sink record: ``{"worker", "dp_rank", "at_ms", "type":
  "ForwardPassMetrics", "num_prefill_requests", ..., "duration_ms"}`` (servesim.sinks.builtin);
* the wire schema of Dynamo's and vLLM's ``ForwardPassMetrics`` (ecosystem.md §5,
  wire-facts.md "FPM"): ``{"version", "worker_id", "dp_rank", "counter_id", "wall_time",
  "scheduled_requests": {...}, "queued_requests": {...}}``. ``wall_time`` is the pass's length in
  seconds; a line with ``wall_time`` 0 and nothing scheduled or queued is an idle heartbeat
  and is skipped. Without an
  ``at_ms`` key a rank's passes are laid end to end (its busy time), since the wire message
  carries no clock.

FPM carries no preemption event; in files they are inferred where a rank's queued decode
requests (preempted requests back in the queue) grow, one mark per added request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from servesim.contract import ForwardPassMetrics
from servesim.errors import UserError
from servesim.report.stats import percentile_key
from servesim.workload.textlines import json_values, read_text_lines

from servesim_plot.data import HANDOFF_KEYS, PlotData, RankPasses, RequestTable
from servesim_plot.elastic import usable
from servesim_plot.series import METRICS
from servesim_plot.timeline import COLUMNS, TimelineRecorder


class InputFileError(UserError):
    """A saved file that cannot be read, naming the file (and line)."""

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        loc = file if line is None else f"{file}:{line}"
        super().__init__(f"{loc}: {message}")


def _open(path: str) -> Any:
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror or exc}", file=path) from None


def load_report(path: str) -> dict[str, Any]:
    """A report JSON (``--output-json``), or the report inside a sweep point's record."""
    with _open(path) as fh:
        try:
            report = json.load(fh)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputFileError(f"not a JSON report: {exc}", file=path) from None
    if isinstance(report, dict) and isinstance(report.get("report"), dict) and "overrides" in report:
        report = report["report"]  # a sweep point's record (servesim_sweep.point)
    if not isinstance(report, dict) or "completed" not in report:
        raise InputFileError("not a servesim report (no 'completed' key)", file=path)
    _check_report(report, path)
    return report


def _check_report(report: dict[str, Any], path: str) -> None:
    """The keys the figures read have the report's types (an edited or foreign file fails
    here, naming the key, rather than inside a figure)."""
    percentiles = report.get("percentiles", [])
    if not isinstance(percentiles, list) or not all(_is_number(p) for p in percentiles):
        raise InputFileError(f"'percentiles' must be a list of numbers, got {percentiles!r}", file=path)
    keys = [f"{percentile_key(p)}_{m}_ms" for p in percentiles for m in METRICS]
    for key in keys:
        value = report.get(key)
        if value is not None and not _is_number(value):
            raise InputFileError(f"{key!r} must be a number, got {value!r}", file=path)
    for key in ("sla", "config"):
        if not isinstance(report.get(key) or {}, dict):
            raise InputFileError(f"{key!r} must be a mapping, got {report[key]!r}", file=path)
    for key, value in (report.get("sla") or {}).items():
        if value is not None and not _is_number(value):
            raise InputFileError(f"'sla.{key}' must be a number, got {value!r}", file=path)
    if "elastic" in report and not usable(report["elastic"]):
        raise InputFileError("'elastic' must hold 'pools' (each with a 'name') and 'workers' (each "
                             "with one of those pools and its 'states' as [t_ms, state] pairs)", file=path)
    cluster = (report.get("config") or {}).get("cluster") or {}
    if not isinstance(cluster, dict) or not isinstance(cluster.get("prefill_workers") or 0, int):
        raise InputFileError(f"'config.cluster' must be a mapping with an integer prefill_workers, "
                             f"got {cluster!r}", file=path)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _lines(path: str, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, rec in json_values(read_text_lines(path, what), path, InputFileError):
        if not isinstance(rec, dict):
            raise InputFileError("expected a JSON object", file=path, line=number)
        yield number, rec


def _field(rec: dict[str, Any], key: str, path: str, line: int, kind: type | tuple[type, ...],
           default: Any = ...) -> Any:
    value = rec.get(key, default)
    if value is ...:
        raise InputFileError(f"missing key {key!r}", file=path, line=line)
    if value is not None and (isinstance(value, bool) and kind is not bool
                              or not isinstance(value, kind)):
        raise InputFileError(f"{key!r} must be {getattr(kind, '__name__', 'a number')}, "
                             f"got {value!r}", file=path, line=line)
    return value


def load_per_request(path: str) -> RequestTable:
    """The per-request JSONL of ``servesim run --per-request`` as a table in request-id order."""
    rows: list[tuple[int, dict[str, Any]]] = []
    num = (int, float)
    for line, rec in _lines(path, "per-request lines"):
        row = {
            "id": _field(rec, "request_id", path, line, int),
            "arrival": _field(rec, "arrival_ms", path, line, num),
            "first": _field(rec, "first_token_ms", path, line, num),
            "done": _field(rec, "completion_ms", path, line, num),
            "e2el": _field(rec, "e2el_ms", path, line, num),
            "ntok": _field(rec, "num_output_tokens", path, line, int),
            "input_length": _field(rec, "input_length", path, line, int),
            "reused": _field(rec, "reused_input_tokens", path, line, int),
            "worker": _field(rec, "worker", path, line, int),
            "rejected": _field(rec, "rejected", path, line, bool),
            "times": _field(rec, "token_times_ms", path, line, list, None),
        }
        for key in HANDOFF_KEYS:
            row[key] = _field(rec, key, path, line, num, None)
        rows.append((row["id"], row))
    rows.sort(key=lambda r: r[0])
    return _table([row for _id, row in rows])


def _table(rows: list[dict[str, Any]]) -> RequestTable:
    def col(key: str, dtype: Any = np.float64) -> np.ndarray:
        return np.array([-1 if r[key] is None else r[key] for r in rows], dtype=dtype)

    arrival = col("arrival")
    e2el = col("e2el")
    has_first = np.array([r["first"] is not None for r in rows], dtype=bool)
    rejected = np.array([r["rejected"] for r in rows], dtype=bool)
    done = col("done")
    gaps: list[float] = []
    with_times = all(r["times"] is not None for r in rows)
    for r in rows:
        if with_times and r["done"] is not None and not r["rejected"]:
            gaps.extend(np.diff(np.asarray(r["times"], dtype=np.float64)).tolist())
    itl = (np.array(gaps), np.ones(len(gaps), dtype=np.int64)) if with_times else None
    handoff = None
    if rows and all(r["source_held_ms"] is not None for r in rows):
        handoff = {k: col(k) for k in HANDOFF_KEYS}
    return RequestTable(
        arrival=arrival, first=col("first"), last=np.where(has_first, arrival + e2el, -1.0),
        done=done, ntok=col("ntok", np.int64), input_length=col("input_length", np.int64),
        reused=col("reused", np.int64), worker=col("worker", np.int64), rejected=rejected,
        itl=itl, handoff=handoff,
    )


_FLAT = ("num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens",
         "num_decode_requests", "sum_decode_kv_tokens", "num_queued_prefill", "num_queued_decode")
_SCHEDULED = ("num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens",
              "num_decode_requests", "sum_decode_kv_tokens")


def _wire_metrics(rec: dict[str, Any], path: str, line: int) -> ForwardPassMetrics:
    sched = _field(rec, "scheduled_requests", path, line, dict)
    queued = _field(rec, "queued_requests", path, line, dict)
    values = {k: _field(sched, k, path, line, (int, float)) for k in _SCHEDULED}
    values["num_queued_prefill"] = _field(queued, "num_prefill_requests", path, line, (int, float))
    values["num_queued_decode"] = _field(queued, "num_decode_requests", path, line, (int, float))
    wall = _field(rec, "wall_time", path, line, (int, float))
    return ForwardPassMetrics(dp_rank=_field(rec, "dp_rank", path, line, int),
                              duration_ms=float(wall) * 1000.0, **values)


def _is_heartbeat(m: ForwardPassMetrics) -> bool:
    """Dynamo's idle beat: no time and nothing scheduled or queued (a zero-length pass that
    did schedule work is kept)."""
    return m.duration_ms == 0.0 and not (
        m.num_prefill_requests or m.num_decode_requests or m.num_queued_prefill
        or m.num_queued_decode)


def load_fpm(path: str) -> dict[tuple[str, int], RankPasses]:
    """Per ``(worker, dp_rank)``, the passes of an FPM JSONL file (either shape)."""
    recorder = TimelineRecorder()
    busy: dict[tuple[str, int], float] = {}
    for line, rec in _lines(path, "forward-pass metrics"):
        if "scheduled_requests" in rec:
            metrics = _wire_metrics(rec, path, line)
            worker = str(_field(rec, "worker_id", path, line, (str, int)))
            if _is_heartbeat(metrics):
                continue  # an idle heartbeat, not a pass
        else:
            values = {k: _field(rec, k, path, line, (int, float)) for k in _FLAT}
            metrics = ForwardPassMetrics(
                dp_rank=_field(rec, "dp_rank", path, line, int),
                duration_ms=float(_field(rec, "duration_ms", path, line, (int, float))), **values)
            worker = str(_field(rec, "worker", path, line, int))
        key = (worker, metrics.dp_rank)
        at = _field(rec, "at_ms", path, line, (int, float), None)
        if at is None:
            at = busy[key] = busy.get(key, 0.0) + metrics.duration_ms
        recorder.pass_metrics(worker, float(at), metrics)
    out: dict[tuple[str, int], RankPasses] = {}
    for (label, dp), rank in sorted(recorder.ranks.items(), key=lambda kv: _order(kv[0])):
        cols = {n: np.frombuffer(rank.columns[n], dtype=np.float64).copy() for n in COLUMNS}
        out[(str(label), dp)] = RankPasses(cols, inferred_preemptions(cols["end_ms"], cols["queued_decode"]))
    return out


def _order(key: tuple[int | str, int]) -> tuple[int, int | str, int]:
    """Numbered workers in numeric order, then named ones (a real engine's ids) by name."""
    worker, dp = str(key[0]), key[1]
    return (0, int(worker), dp) if worker.isdigit() else (1, worker, dp)


def inferred_preemptions(t_ms: np.ndarray, queued_decode: np.ndarray) -> np.ndarray:
    """One time per request added to the queued decode count from one pass to the next."""
    rise = np.diff(np.concatenate(([0.0], queued_decode)))
    up = rise > 0
    return np.repeat(t_ms[up], rise[up].astype(np.int64))


def load(report: str, per_request: str | None = None, fpm: str | None = None,
         label: str | None = None) -> PlotData:
    """The figure data of one run's saved files, labelled (in the legends) by the report's
    file name: a whole path can be wider than the figure."""
    data = PlotData(load_report(report), label=label or os.path.basename(report))
    if per_request is not None:
        data.requests = load_per_request(per_request)
    if fpm is not None:
        data.ranks = load_fpm(fpm)
    return data
