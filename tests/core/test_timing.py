"""Built-in timing models: polynomial and fixed (aisimulate-engine.md §6.1, §6.3, §13.5;
dynamo-mocker.md §4.1) and the interpolated profile model (dynamo-mocker.md §4.2)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from servesim.errors import ConfigError
from servesim.plugins import Plugins
from servesim.timing import FixedTiming, FixedTimingConfig, PolynomialTiming, scaled_ms
from servesim.timing.interpolated import (
    InterpolatedTiming,
    InterpolatedTimingConfig,
    ProfileTables,
    load_profile,
    save_npz,
    tables_from_arrays,
)

# --------------------------------------------------------------------------- polynomial


def test_polynomial_prefill_is_zero_without_new_tokens() -> None:
    model = PolynomialTiming()
    assert model.predict_prefill_ms(1, 128, 128) == 0.0
    assert model.predict_prefill_ms(0, 128, 0) == 0.0
    assert model.predict_prefill_ms(3, 10, 20) == 0.0  # prefix beyond isl: no new tokens


def test_polynomial_prefill_uses_total_new_tokens() -> None:
    model = PolynomialTiming()
    # T = 100: 4.209989e-7*1e4 + 1.518344e-2*100 + 16.50142
    expected = 0.004209989 + 1.518344 + 16.50142
    assert model.predict_prefill_ms(1, 100, 0) == pytest.approx(expected)
    assert model.predict_prefill_ms(2, 100, 50) == pytest.approx(expected)  # 2 × 50 new tokens
    # T = 4096: quadratic term matters
    t = 4096
    assert model.predict_prefill_ms(4, 1024, 0) == pytest.approx(
        4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142
    )


@pytest.mark.parametrize(
    ("active", "total", "expected"),
    [
        (0, 1000, 5.74),
        (500, 1000, -25.74 * 0.25 + 54.01 * 0.5 + 5.74),
        (1000, 1000, -25.74 + 54.01 + 5.74),
        (5000, 1000, -25.74 + 54.01 + 5.74),  # utilisation clamped to 1
        (123, 0, -25.74 + 54.01 + 5.74),  # no capacity reported: u = 1
    ],
)
def test_polynomial_decode(active: int, total: int, expected: float) -> None:
    assert PolynomialTiming().predict_decode_ms(4, active, 10, total) == pytest.approx(expected)


def test_polynomial_decode_empty_batch_is_zero() -> None:
    assert PolynomialTiming().predict_decode_ms(0, 500, 10, 1000) == 0.0


# --------------------------------------------------------------------------- fixed


def test_fixed_model_returns_zero_for_empty_batches() -> None:
    model = FixedTiming(FixedTimingConfig(prefill_ms=12.0, decode_ms=3.0))
    assert model.predict_prefill_ms(0, 100, 0) == 0.0
    assert model.predict_prefill_ms(1, 100, 100) == 0.0
    assert model.predict_decode_ms(0, 100, 10, 1000) == 0.0
    assert model.predict_prefill_ms(5, 100, 0) == 12.0
    assert model.predict_decode_ms(5, 100, 10, 1000) == 3.0


def test_fixed_defaults_and_validation() -> None:
    model = FixedTiming()
    assert (model.predict_prefill_ms(1, 2, 0), model.predict_decode_ms(1, 2, 2, 10)) == (10.0, 1.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="prefill_ms must be finite"):
            FixedTimingConfig(prefill_ms=bad)


# --------------------------------------------------------------------------- scaling


def test_scaled_ms_applies_speedup_and_zero_means_unscaled() -> None:
    assert scaled_ms(12.0, 3.0) == 4.0
    assert scaled_ms(12.0, 0.0) == 12.0
    assert scaled_ms(12.0, -2.0) == 12.0
    assert scaled_ms(0.0, 3.0) == 0.0


@pytest.mark.parametrize("raw", [-1.0, float("nan"), float("inf")])
def test_scaled_ms_rejects_invalid_provider_values(raw: float) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        scaled_ms(raw, 2.0)


# --------------------------------------------------------------------------- interpolated

ARRAYS = {
    "prefill_isl": [100, 200, 400],
    "prefill_ttft_ms": [10.0, 20.0, 30.0],
    "decode_active_kv_tokens": [1000, 2000],
    "decode_context_length": [100, 200],
    "decode_itl": [[5.0, 7.0], [9.0, 13.0]],
}


@pytest.fixture
def model() -> InterpolatedTiming:
    return InterpolatedTiming.from_tables(tables_from_arrays(ARRAYS))


@pytest.mark.parametrize(
    ("batch", "isl", "prefix", "expected"),
    [
        (1, 100, 0, 10.0),
        (1, 400, 0, 30.0),
        (1, 150, 0, 15.0),
        (1, 300, 0, 25.0),
        (2, 100, 25, 15.0),  # x = batch × new tokens = 150
        (1, 500, 0, 35.0),  # extrapolated along the last segment
        (1, 10, 0, 1.0),  # extrapolated along the first segment
        (1, 128, 128, 0.0),  # fully cached
        (0, 100, 0, 0.0),
    ],
)
def test_interpolated_prefill(
    model: InterpolatedTiming, batch: int, isl: int, prefix: int, expected: float
) -> None:
    assert model.predict_prefill_ms(batch, isl, prefix) == pytest.approx(expected)


def test_interpolated_prefill_extrapolation_is_floored_at_zero() -> None:
    steep = dict(ARRAYS, prefill_isl=[100, 200], prefill_ttft_ms=[10.0, 50.0])
    m = InterpolatedTiming.from_tables(tables_from_arrays(steep))
    assert m.predict_prefill_ms(1, 50, 0) == 0.0  # the line gives -10 ms


@pytest.mark.parametrize(
    ("active", "ctx", "expected"),
    [
        (1000, 100, 5.0),
        (2000, 200, 13.0),
        (1000, 200, 7.0),
        (1500, 150, 8.5),  # bilinear: rows give 6 and 11, halfway → 8.5
        (1250, 100, 6.0),
        (3000, 200, 19.0),  # extrapolated along active KV
        (3000, 300, 25.0),  # extrapolated along both axes
        (0, 100, 1.0),
    ],
)
def test_interpolated_decode(model: InterpolatedTiming, active: int, ctx: int, expected: float) -> None:
    assert model.predict_decode_ms(3, active, ctx, 10**9) == pytest.approx(expected)


def test_interpolated_decode_ignores_total_capacity_and_empty_batches(model: InterpolatedTiming) -> None:
    assert model.predict_decode_ms(3, 1500, 150, 1) == model.predict_decode_ms(3, 1500, 150, 10**6)
    assert model.predict_decode_ms(0, 1500, 150, 10**6) == 0.0


def test_interpolated_decode_is_floored_at_one_ms() -> None:
    fast = dict(ARRAYS, decode_itl=[[0.2, 0.3], [0.4, 0.5]])
    m = InterpolatedTiming.from_tables(tables_from_arrays(fast))
    assert m.predict_decode_ms(1, 1500, 150, 10**6) == 1.0
    assert m.predict_decode_ms(1, 0, 0, 10**6) == 1.0  # extrapolates below zero


def test_interpolated_axes_may_come_unsorted(model: InterpolatedTiming) -> None:
    shuffled = {
        "prefill_isl": [400, 100, 200],
        "prefill_ttft_ms": [30.0, 10.0, 20.0],
        "decode_active_kv_tokens": [2000, 1000],
        "decode_context_length": [200, 100],
        "decode_itl": [[13.0, 9.0], [7.0, 5.0]],
    }
    tables = tables_from_arrays(shuffled)
    assert tables == model.tables
    assert tables.decode_itl == ((5.0, 7.0), (9.0, 13.0))


def test_interpolated_single_point_axes_are_constant() -> None:
    one = {
        "prefill_isl": [256],
        "prefill_ttft_ms": [40.0],
        "decode_active_kv_tokens": [1000],
        "decode_context_length": [10, 20],
        "decode_itl": [[4.0, 6.0]],
    }
    m = InterpolatedTiming.from_tables(tables_from_arrays(one))
    assert m.predict_prefill_ms(1, 1, 0) == 40.0
    assert m.predict_prefill_ms(8, 4096, 0) == 40.0
    assert m.predict_decode_ms(1, 99999, 15, 1) == pytest.approx(5.0)
    assert m.predict_decode_ms(1, 1, 30, 1) == pytest.approx(8.0)


# --------------------------------------------------------------------------- profile files


def _write_csv(path: Path, arrays: dict[str, list]) -> None:
    lines = ["kind,tokens,context_length,ms"]
    for x, ms in zip(arrays["prefill_isl"], arrays["prefill_ttft_ms"], strict=True):
        lines.append(f"prefill,{x},,{ms}")
    for i, kv in enumerate(arrays["decode_active_kv_tokens"]):
        for j, ctx in enumerate(arrays["decode_context_length"]):
            lines.append(f"decode,{kv},{ctx},{arrays['decode_itl'][i][j]}")
    # rows written in reverse: the loader must not depend on row order
    path.write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")


def test_npz_json_and_csv_profiles_load_identically(tmp_path: Path, model: InterpolatedTiming) -> None:
    npz = tmp_path / "profile.npz"
    np.savez(npz, **{k: np.asarray(v) for k, v in ARRAYS.items()})
    js = tmp_path / "profile.json"
    js.write_text(json.dumps(ARRAYS))
    cs = tmp_path / "profile.csv"
    _write_csv(cs, ARRAYS)
    for path in (npz, js, cs):
        loaded = InterpolatedTiming(InterpolatedTimingConfig(str(path)))
        assert loaded.tables == model.tables, path.name
        assert loaded.predict_decode_ms(2, 1500, 150, 1) == pytest.approx(8.5)


def test_npz_round_trip(tmp_path: Path, model: InterpolatedTiming) -> None:
    path = tmp_path / "round.npz"
    save_npz(path, model.tables)
    with np.load(path) as data:
        assert sorted(data.files) == sorted(ARRAYS)
        assert data["decode_itl"].shape == (2, 2)
    assert load_profile(path) == model.tables


def _expect_error(path: Path, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message
    assert fragment in message
    assert info.value.path == "engine.timing_model.profile"


def _npz(tmp_path: Path, **changes: object) -> Path:
    arrays = {k: v for k, v in dict(ARRAYS, **changes).items() if v is not None}
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"decode_itl": None}, "missing decode_itl"),
        (
            {"decode_itl": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]},
            "decode_itl has shape 2×3 but the axes need 2×2",
        ),
        ({"prefill_ttft_ms": [1.0, 2.0]}, "prefill_isl has 3 entries but prefill_ttft_ms has 2"),
        ({"prefill_isl": [100, 100, 400]}, "prefill_isl repeats the value 100"),
        ({"decode_itl": [[1.0, math.nan], [1.0, 2.0]]}, "decode_itl holds a non-finite value"),
        ({"decode_context_length": []}, "decode_context_length is empty"),
        ({"decode_itl": [1.0, 2.0]}, "decode_itl must be a 2-D table"),
    ],
)
def test_npz_load_errors_name_file_and_problem(
    tmp_path: Path, changes: dict[str, object], fragment: str
) -> None:
    _expect_error(_npz(tmp_path, **changes), fragment)


def test_missing_unknown_and_corrupt_files(tmp_path: Path) -> None:
    _expect_error(tmp_path / "nope.npz", "file not found")
    other = tmp_path / "profile.yaml"
    other.write_text("x: 1")
    _expect_error(other, "unknown profile format '.yaml'")
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"not a zip archive")
    _expect_error(corrupt, "cannot read profile")


def test_json_load_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{\n  \"prefill_isl\": [1,\n")
    _expect_error(path, "invalid JSON at line")
    path.write_text("[1, 2]")
    _expect_error(path, "expected a JSON object")
    path.write_text('{"a": ' * 5000 + "1" + "}" * 5000)
    _expect_error(path, "JSON nested too deeply to read")
    path.write_text(json.dumps(dict(ARRAYS, prefill_isl=["a", "b", "c"])))
    _expect_error(path, "prefill_isl must hold numbers")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind,x,y,ms\n", "line 1: expected the header kind,tokens,context_length,ms"),
        ("kind,tokens,context_length,ms\nprefill,10,,1\n", "no decode rows"),
        ("kind,tokens,context_length,ms\ndecode,1,1,1\n", "no prefill rows"),
        (
            "kind,tokens,context_length,ms\nprefill,10,,1\ndecode,1,1,1\ndecode,2,2,1\n",
            "decode grid misses tokens=1, context_length=2",
        ),
        ("kind,tokens,context_length,ms\nprefil,10,,1\n", "line 2: kind must be 'prefill' or 'decode'"),
        ("kind,tokens,context_length,ms\nprefill,ten,,1\n", "line 2: tokens, context_length and ms"),
        ("kind,tokens,context_length,ms\nprefill,10,1\n", "line 2: expected 4 columns, got 3"),
        (
            "kind,tokens,context_length,ms\n\nprefill,10,,1\nprefill,10,,2\n",
            "line 4: prefill tokens=10 given twice",
        ),
        ("kind,tokens,context_length,ms\ndecode,10,,1\n", "line 2: decode rows need a context_length"),
        ("kind,tokens,context_length,ms\nprefill,10,,inf\n", "line 2: non-finite value"),
    ],
)
def test_csv_load_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(text)
    _expect_error(path, fragment)


# --------------------------------------------------------------------------- registration


def test_built_in_timing_models_are_registered_by_name(tmp_path: Path) -> None:
    registry = Plugins(autoload=False).timing_models()
    assert {"polynomial", "fixed", "interpolated"} <= set(registry.names())
    assert registry.get("polynomial") is PolynomialTiming
    fixed = registry.get("fixed").from_config(FixedTimingConfig(prefill_ms=2.0, decode_ms=0.5))
    assert fixed.predict_decode_ms(1, 1, 1, 1) == 0.5
    path = tmp_path / "p.json"
    path.write_text(json.dumps(ARRAYS))
    interp = registry.get("interpolated").from_config(InterpolatedTimingConfig(str(path)))
    assert isinstance(interp.tables, ProfileTables)
    assert interp.predict_prefill_ms(1, 300, 0) == pytest.approx(25.0)
    assert registry.entry("interpolated").distribution.startswith("servesim")


def test_interpolated_is_chosen_by_name_in_yaml(tmp_path: Path) -> None:
    from servesim.config.loader import load_config

    profile = tmp_path / "p.json"
    profile.write_text(json.dumps(ARRAYS))
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(f"engine:\n  timing_model:\n    type: interpolated\n    profile: {profile}\n")
    model = load_config(str(cfg)).timing_model()
    assert isinstance(model, InterpolatedTiming)
    assert model.predict_decode_ms(1, 1500, 150, 1) == pytest.approx(8.5)
    missing = tmp_path / "missing.npz"
    loaded = load_config(str(cfg), [f"engine.timing_model.profile={missing}"])
    expected = rf"engine.timing_model.profile: .*{missing.name}'?: file not found"
    with pytest.raises(ConfigError, match=expected):
        loaded.timing_model()
