"""The ``interpolated`` timing model: latencies read from a measured profile table.

Behaviour follows dynamo-mocker.md §4.2:

* prefill: 1-D linear interpolation, with linear extrapolation beyond the table, of
  ``prefill_ttft_ms`` at ``x = batch_size * (mean_isl - mean_prefix)`` (the batch's new tokens);
* decode: bilinear interpolation, with linear extrapolation, of ``decode_itl`` at
  ``(active_kv_tokens, mean_context_length)``; decode is floored at 1 ms like every model;
* a value the table cannot give (non-finite) counts as 0, so decode then lands on the floor.

servesim also floors prefill at 0: extrapolating a steep table towards zero tokens can go
negative, and the reference clamps negative provider values to 0 anyway (§6.3).

Profile formats, chosen by file extension:

``.npz``
    The reference's layout: arrays ``prefill_isl[N]``, ``prefill_ttft_ms[N]``,
    ``decode_active_kv_tokens[R]``, ``decode_context_length[C]``, ``decode_itl[R×C]``.
``.json``
    One object with the same five keys; ``decode_itl`` is a list of R rows of C numbers.
``.csv``
    One long-format table with the header ``kind,tokens,context_length,ms``. Rows with
    ``kind=prefill`` give ``tokens`` (new prefill tokens, the ``prefill_isl`` axis) and ``ms``
    (TTFT), with ``context_length`` left empty. Rows with ``kind=decode`` give ``tokens``
    (active KV tokens), ``context_length`` and ``ms`` (ITL); together they must cover every
    (tokens, context_length) pair of the grid exactly once. Row order does not matter.

Axes may be given in any order; they are sorted (the grid with them) and must not repeat a
value. Every problem is a :class:`~servesim.errors.ConfigError` naming the file.
"""

from __future__ import annotations

import csv
import json
import math
import os
import zipfile
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from attrs import field, frozen, validators

from servesim.errors import ConfigError
from servesim.timing.base import TimingModel

PROFILE_KEY = "engine.timing_model.profile"
DECODE_FLOOR_MS = 1.0
KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")
CSV_HEADER = ("kind", "tokens", "context_length", "ms")


@frozen
class InterpolatedTimingConfig:
    """``profile``: path of an ``.npz``, ``.json`` or ``.csv`` profile (see module docs)."""

    profile: str = field(validator=validators.instance_of(str))


@frozen
class ProfileTables:
    """Validated tables, axes strictly increasing, as plain floats (fast scalar lookups)."""

    prefill_x: tuple[float, ...]
    prefill_ms: tuple[float, ...]
    decode_kv: tuple[float, ...]
    decode_ctx: tuple[float, ...]
    decode_itl: tuple[tuple[float, ...], ...]


class InterpolatedTiming(TimingModel):
    """Interpolates a measured profile (dynamo-mocker.md §4.2)."""

    config_class = InterpolatedTimingConfig

    def __init__(self, config: InterpolatedTimingConfig) -> None:
        self.cfg = config
        self.tables = load_profile(config.profile)

    @classmethod
    def from_tables(cls, tables: ProfileTables) -> InterpolatedTiming:
        self = cls.__new__(cls)
        self.cfg = None  # type: ignore[assignment]
        self.tables = tables
        return self

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        x = batch_size * max(mean_isl - mean_prefix, 0)
        if batch_size <= 0 or x <= 0:
            return 0.0
        t = self.tables
        value = _interp1(t.prefill_x, t.prefill_ms, float(x))
        return value if math.isfinite(value) and value > 0 else 0.0

    def predict_decode_ms(
        self, batch_size: int, active_kv_tokens: int, mean_context_length: int, total_kv_tokens: int
    ) -> float:
        if batch_size <= 0:
            return 0.0
        t = self.tables
        value = _interp2(t.decode_kv, t.decode_ctx, t.decode_itl, float(active_kv_tokens),
                         float(mean_context_length))
        if not math.isfinite(value):
            value = 0.0
        return max(DECODE_FLOOR_MS, value)


# --------------------------------------------------------------------------- interpolation


def _segment(axis: Sequence[float], x: float) -> tuple[int, float]:
    """Left index of the segment used for ``x`` and the fraction along it (may lie outside
    [0, 1]: the end segments extend linearly)."""
    if len(axis) == 1:
        return 0, 0.0
    i = bisect_right(axis, x) - 1
    i = min(max(i, 0), len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def _interp1(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    i, f = _segment(xs, x)
    if len(xs) == 1:
        return ys[0]
    return ys[i] + f * (ys[i + 1] - ys[i])


def _interp2(
    xs: Sequence[float], ys: Sequence[float], z: Sequence[Sequence[float]], x: float, y: float
) -> float:
    i, fx = _segment(xs, x)
    j, fy = _segment(ys, y)
    i1 = min(i + 1, len(xs) - 1)
    j1 = min(j + 1, len(ys) - 1)
    low = z[i][j] + fy * (z[i][j1] - z[i][j])
    high = z[i1][j] + fy * (z[i1][j1] - z[i1][j])
    return low + fx * (high - low)


# --------------------------------------------------------------------------- loading


def load_profile(path: str | os.PathLike[str]) -> ProfileTables:
    """Read and validate a profile; the format follows the file extension."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".npz", ".json", ".csv"):
        fmt = suffix or "(no extension)"
        raise _error(p, f"unknown profile format {fmt!r}; expected .npz, .json or .csv")
    if not p.is_file():
        raise _error(p, "file not found")
    try:
        if suffix == ".npz":
            arrays = _read_npz(p)
        elif suffix == ".json":
            arrays = _read_json(p)
        else:
            arrays = _read_csv(p)
    except ConfigError:
        raise
    except (OSError, ValueError, TypeError, KeyError, zipfile.BadZipFile) as exc:
        raise _error(p, f"cannot read profile: {exc}") from None
    return tables_from_arrays(arrays, source=p)


def tables_from_arrays(
    arrays: dict[str, Any], *, source: str | os.PathLike[str] = "<profile>"
) -> ProfileTables:
    """Validate the five reference arrays and sort every axis (grid rows/columns follow)."""
    p = Path(source)
    missing = [k for k in KEYS if k not in arrays]
    if missing:
        raise _error(p, f"missing {', '.join(missing)} (a profile needs {', '.join(KEYS)})")
    vec = {k: _as_array(p, k, arrays[k], 1) for k in KEYS[:4]}
    grid = _as_array(p, "decode_itl", arrays["decode_itl"], 2)
    if vec["prefill_isl"].shape != vec["prefill_ttft_ms"].shape:
        raise _error(p, f"prefill_isl has {vec['prefill_isl'].size} entries but prefill_ttft_ms has "
                     f"{vec['prefill_ttft_ms'].size}")
    rows, cols = vec["decode_active_kv_tokens"].size, vec["decode_context_length"].size
    if grid.shape != (rows, cols):
        raise _error(p, f"decode_itl has shape {grid.shape[0]}×{grid.shape[1]} but the axes need "
                     f"{rows}×{cols} (decode_active_kv_tokens × decode_context_length)")
    px, py = _sorted_axis(p, "prefill_isl", vec["prefill_isl"])
    kx, kv_order = _sorted_axis(p, "decode_active_kv_tokens", vec["decode_active_kv_tokens"])
    cx, ctx_order = _sorted_axis(p, "decode_context_length", vec["decode_context_length"])
    ttft = vec["prefill_ttft_ms"][py]
    itl = grid[np.ix_(kv_order, ctx_order)]
    return ProfileTables(
        prefill_x=tuple(float(v) for v in px),
        prefill_ms=tuple(float(v) for v in ttft),
        decode_kv=tuple(float(v) for v in kx),
        decode_ctx=tuple(float(v) for v in cx),
        decode_itl=tuple(tuple(float(v) for v in row) for row in itl),
    )


def _error(path: Path, problem: str) -> ConfigError:
    return ConfigError(f"timing profile {str(path)!r}: {problem}", path=PROFILE_KEY)


def _as_array(path: Path, key: str, value: Any, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _error(path, f"{key} must hold numbers") from None
    if arr.ndim != ndim:
        want = "a list of numbers" if ndim == 1 else "a 2-D table (rows × columns)"
        raise _error(path, f"{key} must be {want}, got {arr.ndim} dimension(s)")
    if arr.size == 0:
        raise _error(path, f"{key} is empty")
    if not np.all(np.isfinite(arr)):
        raise _error(path, f"{key} holds a non-finite value")
    return arr


def _sorted_axis(path: Path, key: str, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(axis, kind="stable")
    values = axis[order]
    if values.size > 1 and np.any(np.diff(values) == 0):
        dup = values[np.flatnonzero(np.diff(values) == 0)[0]]
        raise _error(path, f"{key} repeats the value {dup:g}")
    return values, order


def _read_npz(path: Path) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: np.array(data[k]) for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        # numpy's own message for a non-NPZ file talks about pickles; say what is wrong.
        raise _error(path, f"cannot read profile: not a readable NPZ file ({type(exc).__name__})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise _error(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        raise _error(path, "JSON nested too deeply to read") from None
    if not isinstance(data, dict):
        raise _error(path, "expected a JSON object with the profile arrays")
    return data


def _read_csv(path: Path) -> dict[str, Any]:
    prefill: dict[float, float] = {}
    decode: dict[tuple[float, float], float] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != CSV_HEADER:
            raise _error(path, f"line 1: expected the header {','.join(CSV_HEADER)}")
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            _csv_row(path, line, row, prefill, decode)
    if not prefill:
        raise _error(path, "no prefill rows")
    if not decode:
        raise _error(path, "no decode rows")
    kv = sorted({k for k, _ in decode})
    ctx = sorted({c for _, c in decode})
    for k in kv:
        for c in ctx:
            if (k, c) not in decode:
                raise _error(path, f"decode grid misses tokens={k:g}, context_length={c:g}")
    return {
        "prefill_isl": list(prefill),
        "prefill_ttft_ms": list(prefill.values()),
        "decode_active_kv_tokens": kv,
        "decode_context_length": ctx,
        "decode_itl": [[decode[(k, c)] for c in ctx] for k in kv],
    }


def _csv_row(
    path: Path,
    line: int,
    row: list[str],
    prefill: dict[float, float],
    decode: dict[tuple[float, float], float],
) -> None:
    if len(row) != 4:
        raise _error(path, f"line {line}: expected 4 columns, got {len(row)}")
    kind, tokens, ctx, ms = (c.strip() for c in row)
    try:
        x = float(tokens)
        value = float(ms)
        c = float(ctx) if ctx else None
    except ValueError:
        raise _error(path, f"line {line}: tokens, context_length and ms must be numbers") from None
    if not all(math.isfinite(v) for v in (x, value, c if c is not None else 0.0)):
        raise _error(path, f"line {line}: non-finite value")
    if kind == "prefill":
        if x in prefill:
            raise _error(path, f"line {line}: prefill tokens={x:g} given twice")
        prefill[x] = value
    elif kind == "decode":
        if c is None:
            raise _error(path, f"line {line}: decode rows need a context_length")
        if (x, c) in decode:
            raise _error(path, f"line {line}: decode tokens={x:g}, context_length={c:g} given twice")
        decode[(x, c)] = value
    else:
        raise _error(path, f"line {line}: kind must be 'prefill' or 'decode', got {kind!r}")


def save_npz(path: str | os.PathLike[str], tables: ProfileTables) -> None:
    """Write tables in the reference's NPZ layout (for tests and profile conversion)."""
    np.savez(
        path,
        prefill_isl=np.array(tables.prefill_x),
        prefill_ttft_ms=np.array(tables.prefill_ms),
        decode_active_kv_tokens=np.array(tables.decode_kv),
        decode_context_length=np.array(tables.decode_ctx),
        decode_itl=np.array(tables.decode_itl),
    )


__all__ = [
    "InterpolatedTiming",
    "InterpolatedTimingConfig",
    "ProfileTables",
    "load_profile",
    "save_npz",
    "tables_from_arrays",
]
