"""``servesim calibrate``: FPM records in the wire schema and servesim's flat JSONL, the fit
of known models, the fit-error table and the written config fragment."""

from __future__ import annotations

import json

import pytest
import servesim.cli.main as cli
import yaml
from servesim.errors import TraceError
from servesim.timing.builtin import PolynomialTiming, PolynomialTimingConfig
from servesim_calibrate.fit import Pass, fit_errors, fit_polynomial, price, read_passes


def _wire(p: Pass) -> dict:
    """Dynamo's ForwardPassMetrics layout (wire-facts.md "FPM"): wall_time in seconds."""
    return {"version": 1, "worker_id": "7", "dp_rank": 0, "counter_id": 3, "wall_time": p.ms / 1000.0,
            "scheduled_requests": {"num_prefill_requests": p.prefills, "sum_prefill_tokens": p.new_tokens,
                                   "var_prefill_length": 0.0, "sum_prefill_kv_tokens": p.prefix_tokens,
                                   "num_decode_requests": p.decoders, "sum_decode_kv_tokens": p.kv_tokens,
                                   "var_decode_kv_tokens": 0.0},
            "queued_requests": {"num_prefill_requests": 2, "sum_prefill_tokens": 100, "var_prefill_length": 0.0,
                                "num_decode_requests": 0, "sum_decode_kv_tokens": 0, "var_decode_kv_tokens": 0.0}}


def _flat(p: Pass) -> dict:
    return {"worker": 0, "dp_rank": 0, "at_ms": 1.0, "type": "ForwardPassMetrics", "counter_id": 0,
            "num_prefill_requests": p.prefills, "sum_prefill_tokens": p.new_tokens,
            "sum_prefill_kv_tokens": p.prefix_tokens, "num_decode_requests": p.decoders,
            "sum_decode_kv_tokens": p.kv_tokens, "duration_ms": p.ms}


KNOWN = PolynomialTimingConfig(prefill=(2e-6, 0.03, 12.0), decode=(-10.0, 30.0, 4.0))
KV = 100_000


def _passes() -> list[Pass]:
    model = PolynomialTiming(KNOWN)
    shapes = [(1, 512 * k, 0, 0, 0) for k in range(1, 6)]
    shapes += [(0, 0, 0, d, d * c) for d in (4, 16, 40) for c in (300, 900, 2000)]
    shapes += [(2, 800, 200, 8, 8 * 1000)]
    out = []
    for b, new, pre, d, kv in shapes:
        ms = price(model, Pass(b, new, pre, d, kv, 0.0), KV)
        out.append(Pass(b, new, pre, d, kv, ms))
    return out


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_wire_and_flat_records_read_the_same(tmp_path):
    passes = _passes()
    heartbeat = _wire(Pass(0, 0, 0, 0, 0, 0.0))
    wire = read_passes(_write(tmp_path / "w.jsonl", [heartbeat] + [_wire(p) for p in passes]))
    flat = read_passes(_write(tmp_path / "f.jsonl", [_flat(p) for p in passes]))
    assert [(p.prefills, p.new_tokens, p.prefix_tokens, p.decoders, p.kv_tokens) for p in wire] == \
        [(p.prefills, p.new_tokens, p.prefix_tokens, p.decoders, p.kv_tokens) for p in passes]
    assert [p.ms for p in wire] == pytest.approx([p.ms for p in passes], rel=1e-12)
    assert flat == passes
    assert [p.kind for p in passes[:1] + passes[-1:]] == ["prefill", "mixed"]


@pytest.mark.parametrize(("line", "problem"), [
    ("[1, 2]", "expected a JSON object"),
    ('{"num_decode_requests": 2, "sum_decode_kv_tokens": 10}', "no pass time"),
    ('{"num_decode_requests": -1, "duration_ms": 1}', "num_decode_requests must be a non-negative"),
    ("{nope", "invalid JSON: Expecting property name enclosed in double quotes (column 2)"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read"),
])
def test_a_bad_record_names_file_and_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_flat(_passes()[0])) + "\n" + line + "\n")
    with pytest.raises(TraceError) as info:
        read_passes(str(path))
    assert info.value.line == 2 and problem in str(info.value) and str(path) in str(info.value)


def test_polynomial_fit_recovers_the_model_that_made_the_passes():
    fitted = fit_polynomial(_passes(), KV)
    assert fitted["prefill"] == pytest.approx(list(KNOWN.prefill), rel=1e-6)
    assert fitted["decode"] == pytest.approx(list(KNOWN.decode), rel=1e-6)
    model = PolynomialTiming(PolynomialTimingConfig(prefill=tuple(fitted["prefill"]),
                                                    decode=tuple(fitted["decode"])))
    errors = fit_errors(_passes(), lambda p: price(model, p, KV))
    assert {k: int(e["passes"]) for k, e in errors.items()} == {"prefill": 5, "decode": 9, "mixed": 1}
    assert all(e["p99_abs_ms"] < 1e-6 and e["mape_pct"] < 1e-6 for e in errors.values())


def test_cli_writes_a_fragment_that_layers_over_a_base(tmp_path, capsys):
    fpm = _write(tmp_path / "fpm.jsonl", [_wire(p) for p in _passes()])
    out = tmp_path / "fitted.yaml"
    assert cli.main(["calibrate", fpm, "--model", "polynomial", "--kv-tokens", str(KV), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "MAPE %" in printed and printed.count("\n") == 5  # header line, table header, 3 kinds
    fragment = yaml.safe_load(out.read_text())
    assert fragment["engine"]["timing_model"]["type"] == "polynomial"
    assert fragment["engine"]["timing_model"]["decode"] == pytest.approx(list(KNOWN.decode), rel=1e-6)

    out2 = tmp_path / "interp.yaml"
    assert cli.main(["calibrate", fpm, "-o", str(out2)]) == 0
    profile = yaml.safe_load(out2.read_text())["engine"]["timing_model"]["profile"]
    assert profile == str(tmp_path / "interp.profile.json")
    tables = json.loads((tmp_path / "interp.profile.json").read_text())
    xs = tables["prefill_isl"]
    assert xs == sorted(xs) and (xs[0], xs[-1]) == (512.0, 2560.0) and 2 <= len(xs) <= 6
    assert len(tables["decode_itl"]) == len(tables["decode_active_kv_tokens"])


def test_polynomial_needs_the_pool_size(tmp_path, capsys):
    fpm = _write(tmp_path / "fpm.jsonl", [_flat(p) for p in _passes()])
    assert cli.main(["calibrate", fpm, "--model", "polynomial", "-o", str(tmp_path / "x.yaml")]) == 2
    assert "--kv-tokens" in capsys.readouterr().err
