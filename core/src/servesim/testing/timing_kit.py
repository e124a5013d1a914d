"""A check kit for timing models: what every backend relies on, checked against any model.

``check_timing_model(make_model)`` takes a zero-argument callable building a fresh model
(``lambda: MyTiming(MyConfig(...))``) and checks:

* ``is_timing_model``: it is a :class:`~servesim.timing.base.TimingModel`;
* ``durations_valid``: every duration over a grid of batch shapes is a finite float >= 0
  (through whichever contract the model implements, and through ``predict_pass_ms``);
* ``empty_pass_is_free``: a pass shape with no prefill and no decode lasts 0 ms
  (aisimulate-engine.md §6.4: a pass with no model work has duration 0);
* ``pure``: the same inputs give bit-identical results, in any order and on a second
  instance (one instance is shared by every rank; runs of passes re-price passes);
* ``many_matches_scalar``: a model with ``predict_decode_ms_many``
  (:class:`~servesim.fast.decode_many.PricesManyDecodes`) gives ``predict_decode_ms``'s results
  element for element, bit for bit (runs of passes price many passes at once with it);
* ``default_pass_matches_methods``: for a two-method model, the default ``predict_pass_ms``
  of a shape equals the two methods' pricing of it;
* ``speedups_applied``: ``predict_pass_ms`` divides a prefill-only pass by the shape's
  ``speedup_ratio`` and a decode-only pass by its ``decode_speedup`` (to within the
  nanosecond rounding of :func:`~servesim.timing.base.scaled_ms`), and each speed-up leaves
  the other kind of pass alone (aisimulate-engine.md §6.3; every backend prices a pass so);
* ``worker_role_zeros``: a decode worker's pass costs no prefill and a prefill worker's no
  decode: a prefill-only shape on a decode worker and a decode-only shape on a prefill worker
  last 0 ms, and a mixed shape on either lasts what its own part alone lasts.

Each check that prices a pass does so through ``predict_pass_ms``, whichever contract the
model implements: for a two-method model that is the default pricing, which passes them.

``check_timing_model`` raises ``AssertionError`` listing every failure (or returns the
:class:`~servesim.testing.conformance.ConformanceReport` with ``raise_on_failure=False``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import numpy as np

from servesim.contract import WorkerType
from servesim.fast.decode_many import PricesManyDecodes
from servesim.testing.conformance import ConformanceReport
from servesim.testing.kit import run_checks
from servesim.timing.base import TimingModel, scaled_ms
from servesim.timing.pricing import prices_pass_shapes
from servesim.timing.shape import EngineGeometry, PassShape, PrefillChunk

MakeModel = Callable[[], Any]
TOTAL_KV = 64 * 1024
PREFILL_GRID = [
    (b, isl, p) for b in (1, 2, 7, 64) for isl in (1, 16, 513, 8192) for p in (0, isl // 2, isl - 1)
]
DECODE_GRID = [(b, ctx) for b in (1, 3, 32, 256) for ctx in (1, 17, 1024, 16384)]
GEOMETRY = EngineGeometry(
    num_layers=32,
    num_kv_heads=8,
    head_dim=128,
    kv_dtype_bytes=2.0,
    kv_bytes_per_token=131072.0,
    block_size=16,
    num_gpu_blocks=TOTAL_KV // 16,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    dp_size=1,
)


def sample_shapes() -> list[PassShape]:
    """Prefill-only, decode-only and mixed passes on every worker role."""
    shapes = []
    for role in WorkerType:
        for b, isl, p in PREFILL_GRID[::5]:
            chunks = tuple(PrefillChunk(isl - p, p) for _ in range(b))
            shapes.append(_shape(role, chunks, ()))
        for b, ctx in DECODE_GRID:
            shapes.append(_shape(role, (), (ctx,) * b))
        shapes.append(_shape(role, (PrefillChunk(300, 100), PrefillChunk(0, 64)), (40, 2000, 7)))
    return shapes


def _shape(role: WorkerType, chunks: tuple[PrefillChunk, ...], decode: tuple[int, ...]) -> PassShape:
    return PassShape("kit", role, 0, GEOMETRY, chunks, decode, min(sum(decode), TOTAL_KV), TOTAL_KV, 1.0, 1.0)


def _two_methods(model: Any) -> bool:
    cls = type(model)
    return (
        cls.predict_prefill_ms is not TimingModel.predict_prefill_ms
        and cls.predict_decode_ms is not TimingModel.predict_decode_ms
    )


def _calls(model: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Every duration the kit asks for, labelled by its inputs, as calls not yet made."""
    out: list[tuple[str, Callable[[], Any]]] = []
    if _two_methods(model):
        out += [(f"predict_prefill_ms{a}", partial(model.predict_prefill_ms, *a)) for a in PREFILL_GRID]
        for b, c in DECODE_GRID:
            args = (b, b * c, c, TOTAL_KV)
            out.append((f"predict_decode_ms{args}", partial(model.predict_decode_ms, *args)))
    for i, shape in enumerate(sample_shapes()):
        out.append((f"predict_pass_ms(sample shape {i})", partial(model.predict_pass_ms, shape)))
    return out


def _values(model: Any) -> list[tuple[str, Any]]:
    return [(label, call()) for label, call in _calls(model)]


def check_is_timing_model(make: MakeModel) -> list[str]:
    model = make()
    return [] if isinstance(model, TimingModel) else [f"{type(model).__name__} is not a TimingModel"]


def check_durations_valid(make: MakeModel) -> list[str]:
    bad = []
    for label, value in _values(make()):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            bad.append(f"{label} returned {value!r}, not a finite number >= 0")
    return bad[:10]


def check_empty_pass_is_free(make: MakeModel) -> list[str]:
    ms = make().predict_pass_ms(_shape(WorkerType.AGGREGATED, (), ()))
    return [] if ms == 0 else [f"a pass with no work lasts {ms!r} ms, expected 0"]


def check_pure(make: MakeModel) -> list[str]:
    first, again = make(), make()
    forward = _values(first)
    backward = [(label, call()) for label, call in reversed(_calls(first))][::-1]
    other = _values(again)
    bad = []
    for (label, a), (_, b), (_, c) in zip(forward, backward, other, strict=True):
        if repr(a) != repr(b) or repr(a) != repr(c):
            bad.append(f"{label} is not repeatable: {a!r}, then {b!r}, on a fresh instance {c!r}")
    return bad[:10]


def check_many_matches_scalar(make: MakeModel) -> list[str]:
    model = make()
    if (not _two_methods(model) or prices_pass_shapes(model)
            or not isinstance(model, PricesManyDecodes)):
        return []  # a pass-shape model declines runs, which are what call it
    bad = []
    for b in (1, 5, 64):
        active = np.array([b * c for c in (1, 9, 700, 5000, 40000)], dtype=np.int64)
        many = model.predict_decode_ms_many(b, active, TOTAL_KV)
        for a, m in zip(active.tolist(), np.asarray(many).tolist(), strict=True):
            s = model.predict_decode_ms(b, a, a // b, TOTAL_KV)
            if float(s) != float(m):
                bad.append(f"predict_decode_ms_many({b}, [{a}]) = {m!r}, predict_decode_ms = {s!r}")
    return bad[:10]


def check_default_pass_matches_methods(make: MakeModel) -> list[str]:
    model = make()
    if not _two_methods(model) or prices_pass_shapes(model):
        return []
    bad = []
    for i, shape in enumerate(sample_shapes()):
        expect = _methods_price(model, shape)
        got = model.predict_pass_ms(shape)
        if got != expect:
            bad.append(f"sample shape {i}: predict_pass_ms = {got!r}, the two methods give {expect!r}")
    return bad[:10]


def _methods_price(model: Any, shape: PassShape) -> float:
    prefill = decode = 0.0
    n = len(shape.prefill)
    if n and shape.worker_type is not WorkerType.DECODE:
        isl = sum(c.context_length for c in shape.prefill) // n
        prefix = sum(c.cached_prefix for c in shape.prefill) // n
        if isl != prefix:
            prefill = scaled_ms(model.predict_prefill_ms(n, isl, prefix), shape.speedup_ratio)
    m = len(shape.decode)
    if m and shape.worker_type is not WorkerType.PREFILL:
        raw = model.predict_decode_ms(
            m, shape.active_kv_tokens, sum(shape.decode) // m, shape.total_kv_tokens
        )
        decode = scaled_ms(raw, shape.decode_speedup)
    return prefill + decode


#: Shapes the speed-up and worker-role checks price, on an aggregated worker.
_PREFILL_ONLY = ((PrefillChunk(300, 100), PrefillChunk(512, 0)), ())
_DECODE_ONLY = ((), (40, 2000, 7))
_MIXED = ((PrefillChunk(300, 100),), (40, 2000, 7))
_NS = 1e-6  # scaled_ms rounds to whole nanoseconds


def _price(model: Any, role: WorkerType, parts: tuple[tuple[PrefillChunk, ...], tuple[int, ...]],
           speedup: float = 1.0, decode_speedup: float = 1.0) -> float:
    chunks, decode = parts
    shape = PassShape("kit", role, 0, GEOMETRY, chunks, decode, min(sum(decode), TOTAL_KV), TOTAL_KV,
                      speedup, decode_speedup)
    return float(model.predict_pass_ms(shape))


def check_speedups_applied(make: MakeModel) -> list[str]:
    model = make()
    agg = WorkerType.AGGREGATED
    bad = []
    for what, parts, own, other in (("prefill-only", _PREFILL_ONLY, "speedup_ratio", "decode_speedup"),
                                    ("decode-only", _DECODE_ONLY, "decode_speedup", "speedup_ratio")):
        base = _price(model, agg, parts)
        mine = {own: 2.0, other: 1.0}
        fast = _price(model, agg, parts, mine["speedup_ratio"], mine["decode_speedup"])
        if abs(fast - base / 2) > _NS:
            bad.append(f"a {what} pass lasts {fast!r} ms with {own} 2, {base!r} ms with 1: "
                       f"expected {base / 2!r} (the pass divided by {own})")
        theirs = {other: 2.0, own: 1.0}
        same = _price(model, agg, parts, theirs["speedup_ratio"], theirs["decode_speedup"])
        if same != base:
            bad.append(f"a {what} pass lasts {same!r} ms with {other} 2, {base!r} ms with 1: "
                       f"{other} must leave it alone")
    return bad


def check_worker_role_zeros(make: MakeModel) -> list[str]:
    model = make()
    bad = []
    zeros = ((WorkerType.DECODE, _PREFILL_ONLY, "a prefill-only pass on a decode worker"),
             (WorkerType.PREFILL, _DECODE_ONLY, "a decode-only pass on a prefill worker"))
    for role, parts, what in zeros:
        ms = _price(model, role, parts)
        if ms != 0:
            bad.append(f"{what} lasts {ms!r} ms, expected 0 (that worker does no such work)")
    for role, part, what in ((WorkerType.DECODE, ((), _MIXED[1]), "its decode part"),
                             (WorkerType.PREFILL, (_MIXED[0], ()), "its prefill part")):
        mixed, alone = _price(model, role, _MIXED), _price(model, role, part)
        if mixed != alone:
            bad.append(f"a mixed pass on a {role.value} worker lasts {mixed!r} ms, {what} alone "
                       f"{alone!r} ms: expected the same")
    return bad


TIMING_CHECKS = {
    "is_timing_model": check_is_timing_model,
    "durations_valid": check_durations_valid,
    "empty_pass_is_free": check_empty_pass_is_free,
    "pure": check_pure,
    "many_matches_scalar": check_many_matches_scalar,
    "default_pass_matches_methods": check_default_pass_matches_methods,
    "speedups_applied": check_speedups_applied,
    "worker_role_zeros": check_worker_role_zeros,
}
"""Every timing-model check by name, in the order :func:`check_timing_model` runs them."""


def check_timing_model(
    make_model: MakeModel, *, skip: Iterable[str] = (), raise_on_failure: bool = True
) -> ConformanceReport:
    """Run every timing-model check (minus ``skip``) on models from ``make_model``."""
    return run_checks("timing model", TIMING_CHECKS, make_model, skip=skip, raise_on_failure=raise_on_failure)


__all__ = ["TIMING_CHECKS", "check_timing_model", "sample_shapes"]
