"""``servesim calibrate FPM.jsonl [--model polynomial|interpolated] -o FILE``: fit a timing
model to measured forward passes.

Input: one forward-pass-metrics record per line, either Dynamo's wire schema
(``ForwardPassMetrics`` with ``scheduled_requests{...}`` and ``wall_time`` in seconds;
ecosystem.md §5, wire-facts.md "FPM") or servesim's flat FPM JSONL (the same counters at top
level, with ``duration_ms`` or ``wall_time``). Passes with no scheduled work (heartbeats) are
skipped.

Fit (the shapes the timing models price, aisimulate-engine.md §6.3): decode on decode-only
passes at ``(batch, summed KV tokens)``; prefill on prefill-only passes at the batch's new
tokens, plus mixed passes once the fitted decode cost is taken off (vLLM prices a mixed pass
as prefill then decode). The fit error is reported per kind of pass with the fitted model
pricing each pass itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import yaml
from attrs import frozen
from servesim.errors import TraceError, UserError
from servesim.timing.base import TimingModel
from servesim.timing.builtin import PolynomialTiming, PolynomialTimingConfig
from servesim.timing.interpolated import InterpolatedTiming, tables_from_arrays
from servesim.workload.textlines import json_values, read_text_lines

COUNTERS = ("num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens",
            "num_decode_requests", "sum_decode_kv_tokens")
KINDS = ("prefill", "decode", "mixed")
PREFILL_KNOTS = 24
DECODE_KNOTS = 8


@frozen
class Pass:
    """One measured pass: prefill requests, their new and cached tokens, decoders, their
    summed KV tokens, and the measured milliseconds."""

    prefills: int
    new_tokens: int
    prefix_tokens: int
    decoders: int
    kv_tokens: int
    ms: float

    @property
    def kind(self) -> str:
        if self.new_tokens and self.decoders:
            return "mixed"
        return "prefill" if self.new_tokens else "decode"


def _record_pass(rec: Any) -> Pass | None:
    if not isinstance(rec, dict):
        raise ValueError("expected a JSON object")
    counts = rec.get("scheduled_requests", rec)
    if not isinstance(counts, dict):
        raise ValueError("scheduled_requests must be an object")
    values = []
    for key in COUNTERS:
        v = counts.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{key} must be a non-negative number, got {v!r}")
        values.append(int(v))
    if "duration_ms" in rec:
        ms = rec["duration_ms"]
    elif "wall_time" in rec:
        ms = rec["wall_time"] * 1000.0 if isinstance(rec["wall_time"], (int, float)) else None
    else:
        raise ValueError("no pass time: expected wall_time (seconds) or duration_ms")
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms < 0:
        raise ValueError(f"the pass time must be a finite number >= 0, got {ms!r}")
    p = Pass(values[0], values[1], values[2], values[3], values[4], float(ms))
    if not p.new_tokens and not p.decoders:
        return None
    if (p.new_tokens and not p.prefills) or (p.decoders and not p.kv_tokens):
        raise ValueError("scheduled counters disagree (tokens without requests)")
    return p


def read_passes(path: str) -> list[Pass]:
    """Every pass with scheduled work in ``path``; a bad line is a TraceError (file:line)."""
    out: list[Pass] = []
    for no, rec in json_values(read_text_lines(path, "forward-pass metrics"), path):
        try:
            p = _record_pass(rec)
        except (ValueError, TypeError) as exc:
            raise TraceError(f"not a forward-pass record: {exc}", file=path, line=no) from None
        if p is not None:
            out.append(p)
    return out


def price(model: TimingModel, p: Pass, total_kv_tokens: int) -> float:
    """The pass as servesim's ranks price it: prefill at the batch's mean lengths, then
    decode at the decoders' summed KV (aisimulate-engine.md §6.3-§6.4)."""
    ms = 0.0
    if p.new_tokens:
        isl = (p.new_tokens + p.prefix_tokens) // p.prefills
        ms += model.predict_prefill_ms(p.prefills, isl, p.prefix_tokens // p.prefills)
    if p.decoders:
        ms += model.predict_decode_ms(p.decoders, p.kv_tokens, p.kv_tokens // p.decoders, total_kv_tokens)
    return ms


def _prefill_samples(passes: Sequence[Pass], decode_ms: Callable[[Pass], float]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for p in passes:
        if p.new_tokens:
            # The timing models price the batch's mean new tokens times its size.
            isl = (p.new_tokens + p.prefix_tokens) // p.prefills
            xs.append(p.prefills * (isl - p.prefix_tokens // p.prefills))
            ys.append(p.ms - (decode_ms(p) if p.decoders else 0.0))
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


class TooFewPasses(UserError):
    """The file holds too few passes of a kind to fit; :func:`run` names the file."""


def _need(n: int, what: str, at_least: int) -> None:
    if n < at_least:
        raise TooFewPasses(f"calibrate needs at least {at_least} {what} passes, the file has {n}")


def _distinct(xs: Any, what: str) -> None:
    """A quadratic through fewer than three distinct x values is not determined (numpy would
    only warn that the fit is poorly conditioned)."""
    n = len(np.unique(np.asarray(xs, dtype=np.float64)))
    if n < 3:
        raise TooFewPasses(f"calibrate needs {what} passes at 3 or more distinct sizes, the file has {n}")


def fit_polynomial(passes: Sequence[Pass], total_kv_tokens: int) -> dict[str, Any]:
    """``polynomial`` coefficients: prefill over new tokens, decode over KV utilisation."""
    dec = [p for p in passes if p.kind == "decode"]
    _need(len(dec), "decode-only", 3)
    u = np.minimum(np.array([p.kv_tokens for p in dec]) / total_kv_tokens, 1.0)
    _distinct(u, "decode-only")
    decode = [float(c) for c in np.polyfit(u, [p.ms for p in dec], 2)]
    model = PolynomialTiming(PolynomialTimingConfig(decode=tuple(decode)))  # type: ignore[arg-type]
    xs, ys = _prefill_samples(passes, lambda p: model.predict_decode_ms(
        p.decoders, p.kv_tokens, p.kv_tokens // p.decoders, total_kv_tokens))
    _need(len(xs), "prefill or mixed", 3)
    _distinct(xs, "prefill or mixed")
    prefill = [float(c) for c in np.polyfit(xs, ys, 2)]
    return {"type": "polynomial", "prefill": prefill, "decode": decode}


def _knots(values: np.ndarray, n: int) -> np.ndarray:
    return np.unique(np.round(np.quantile(values, np.linspace(0.0, 1.0, n))))


def _decode_grid(dec: Sequence[Pass]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ITL over (summed KV, mean context): each cell the mean of the passes nearest it, cells
    without passes from a least-squares plane in (KV, batch) through all of them."""
    kv = np.array([p.kv_tokens for p in dec], dtype=np.float64)
    ctx = np.array([p.kv_tokens // p.decoders for p in dec], dtype=np.float64)
    ms = np.array([p.ms for p in dec])
    kv_axis, ctx_axis = _knots(kv, DECODE_KNOTS), _knots(ctx, DECODE_KNOTS)
    design = np.column_stack([np.ones_like(kv), kv, kv / np.maximum(ctx, 1.0)])
    coef = np.linalg.lstsq(design, ms, rcond=None)[0]
    ki = np.abs(kv[:, None] - kv_axis[None, :]).argmin(axis=1)
    ci = np.abs(ctx[:, None] - ctx_axis[None, :]).argmin(axis=1)
    grid = np.empty((len(kv_axis), len(ctx_axis)))
    for r, k in enumerate(kv_axis):
        for c, x in enumerate(ctx_axis):
            hit = (ki == r) & (ci == c)
            grid[r, c] = ms[hit].mean() if hit.any() else coef @ (1.0, k, k / max(x, 1.0))
    return kv_axis, ctx_axis, grid


def _prefill_table(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axis = _knots(xs, PREFILL_KNOTS)
    idx = np.abs(xs[:, None] - axis[None, :]).argmin(axis=1)
    keep = [i for i in range(len(axis)) if (idx == i).any()]
    return axis[keep], np.array([np.median(ys[idx == i]) for i in keep])


def fit_interpolated(passes: Sequence[Pass], profile: str) -> tuple[dict[str, Any], InterpolatedTiming]:
    """An ``interpolated`` profile (written to ``profile`` as JSON) and the model it gives."""
    dec = [p for p in passes if p.kind == "decode"]
    _need(len(dec), "decode-only", 3)
    kv_axis, ctx_axis, grid = _decode_grid(dec)
    decode_only = tables_from_arrays({
        "prefill_isl": np.array([1.0, 2.0]), "prefill_ttft_ms": np.array([0.0, 0.0]),
        "decode_active_kv_tokens": kv_axis, "decode_context_length": ctx_axis, "decode_itl": grid},
        source=profile)
    model = InterpolatedTiming.from_tables(decode_only)
    xs, ys = _prefill_samples(passes, lambda p: model.predict_decode_ms(
        p.decoders, p.kv_tokens, p.kv_tokens // p.decoders, 0))
    _need(len(xs), "prefill or mixed", 2)
    px, py = _prefill_table(xs, ys)
    arrays = {"prefill_isl": px.tolist(), "prefill_ttft_ms": py.tolist(),
              "decode_active_kv_tokens": kv_axis.tolist(), "decode_context_length": ctx_axis.tolist(),
              "decode_itl": grid.tolist()}
    if len(px) < 2:
        raise TooFewPasses("calibrate needs prefill passes of at least two sizes")
    tables = tables_from_arrays({k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()},
                                source=profile)
    with _open_for_writing(profile) as out:
        try:
            json.dump(arrays, out)
            out.write("\n")
        except OSError as exc:
            raise UserError(f"cannot write {profile}: {exc.strerror or exc}") from None
    return {"type": "interpolated", "profile": profile}, InterpolatedTiming.from_tables(tables)


def fit_errors(passes: Iterable[Pass], predict: Callable[[Pass], float]) -> dict[str, dict[str, float]]:
    """Per kind of pass: count, MAPE (%) and p50/p90/p99 absolute error (ms)."""
    groups: dict[str, list[tuple[float, float]]] = {k: [] for k in KINDS}
    for p in passes:
        groups[p.kind].append((predict(p), p.ms))
    out: dict[str, dict[str, float]] = {}
    for kind, pairs in groups.items():
        if not pairs:
            continue
        pred, meas = np.array(pairs).T
        err = np.abs(pred - meas)
        rel = err[meas > 0] / meas[meas > 0]
        out[kind] = {"passes": len(pairs), "mape_pct": float(rel.mean() * 100) if rel.size else 0.0,
                     **{f"p{q}_abs_ms": float(np.percentile(err, q)) for q in (50, 90, 99)}}
    return out


def format_errors(errors: dict[str, dict[str, float]]) -> str:
    lines = [f"{'pass':<8}{'passes':>8}{'MAPE %':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"]
    for kind, e in errors.items():
        lines.append(f"{kind:<8}{int(e['passes']):>8}{e['mape_pct']:>9.2f}{e['p50_abs_ms']:>9.3f}"
                     f"{e['p90_abs_ms']:>9.3f}{e['p99_abs_ms']:>9.3f}")
    return "\n".join(lines)


def profile_path(output: str) -> str:
    """Where the interpolated model's tables go: beside ``output``, named after it."""
    return f"{os.path.splitext(output)[0]}.profile.json"


def _check_outputs(args: argparse.Namespace) -> None:
    """Both files can be written (missing folders are created), before anything is read
    or written: a bad ``-o`` leaves no profile behind."""
    from servesim.config.output_paths import file_problem

    paths = [args.output] + ([profile_path(args.output)] if args.model != "polynomial" else [])
    for path in paths:
        names_folder = os.path.basename(path) in ("", ".", "..")  # out/ or .
        problem = "it names a directory" if names_folder else file_problem(path)
        if problem is not None:
            raise UserError(f"--output: cannot write {path!r}: {problem}")


def _open_for_writing(path: str) -> Any:
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    if args.kv_tokens is not None and args.kv_tokens < 1:
        raise UserError(f"--kv-tokens: expected an integer >= 1, got {args.kv_tokens}")
    _check_outputs(args)
    passes = read_passes(args.fpm)
    try:
        return _fit_and_write(args, passes)
    except TooFewPasses as exc:
        raise UserError(f"{args.fpm}: {exc}") from None


def _fit_and_write(args: argparse.Namespace, passes: list[Pass]) -> int:
    if args.model == "polynomial":
        if args.kv_tokens is None:
            raise UserError("--model polynomial needs --kv-tokens N (the pool's num_gpu_blocks x block_size)")
        timing = fit_polynomial(passes, args.kv_tokens)
        model: TimingModel = PolynomialTiming(PolynomialTimingConfig(
            prefill=tuple(timing["prefill"]), decode=tuple(timing["decode"])))  # type: ignore[arg-type]
        total = args.kv_tokens
    else:
        timing, model = fit_interpolated(passes, profile_path(args.output))
        total = 0
    errors = fit_errors(passes, lambda p: price(model, p, total))
    with _open_for_writing(args.output) as out:
        try:
            yaml.safe_dump({"engine": {"timing_model": timing}}, out, sort_keys=False)
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"fitted {args.model} to {len(passes)} passes of {args.fpm}; wrote {args.output}")
    print(format_errors(errors))
    return 0
