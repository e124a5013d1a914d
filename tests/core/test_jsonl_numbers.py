"""servesim.sinks.jsonl_lines turns numbers into text with msgspec: the texts must be exactly what
``json.dumps`` (``repr``) writes, and lists holding a float msgspec writes differently are
written number by number."""

from __future__ import annotations

import json
import math

import servesim.sinks.jsonl_lines as jsonl_lines
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import ForwardPassMetrics
from servesim.fast.fpm_runs import FpmRun
from servesim.kv.event_records import RemovedRun, StoredRun, materialise
from servesim.sinks.builtin import fpm_record, kv_event_record
from servesim.sinks.jsonl_lines import (
    MIN_ENCODED,
    POSITIONAL,
    _int_list,
    _positional,
    _texts,
    fpm_line,
    fpm_run_lines,
    kv_event_lines,
)

finite = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(-(2**70), 2**70)
LOW, HIGH = POSITIONAL
#: Floats at and next to the ends of the positional range, and values msgspec writes
#: differently from ``repr`` (exponents outside the range, both signs).
EDGES = [0.0, -0.0, LOW, math.nextafter(LOW, 0.0), math.nextafter(LOW, 1.0), HIGH,
         math.nextafter(HIGH, 0.0), 1e-5, 2.5e-5, 5e-324, 1.7976931348623157e308, 1e16, 1e17,
         123456789012345.0, 1234567890123456.0, 0.1, 100.0]
EDGES += [-x for x in EDGES]


@settings(max_examples=400, derandomize=True)
@given(st.lists(st.one_of(finite, ints, st.sampled_from(EDGES)), min_size=1, max_size=12))
def test_texts_are_what_json_writes(values: list) -> None:
    assert _texts(values) == [json.dumps(v) for v in values]


def test_each_edge_float_is_written_as_json_writes_it() -> None:
    for x in EDGES:
        for values in ([x], [x] * MIN_ENCODED, [1.5, x, 2.5], [x, 0.0, 7.0], [0, x]):
            assert _texts(values) == [json.dumps(v) for v in values], values


def test_lists_in_the_positional_range_are_encoded_and_others_are_not() -> None:
    inside = [0.0, -0.0, LOW, 39.583057, 0.005843231000000003, math.nextafter(HIGH, 0.0), 12, -3.5]
    assert _positional(inside) and _positional([0.0, -0.0]) and _positional([0, 12, 1.5])
    assert _texts(inside) == ["0.0", "-0.0", "0.0001", "39.583057", "0.005843231000000003",
                              "9999999999999998.0", "12", "-3.5"]
    for outside in ([1.0, 2.0, 1e-5], [1.0, 2.0, HIGH], [-HIGH, 1.0, 2.0], [5e-324, 1.0, 2.0],
                    [0.0, 1e-5], [10**16, 1.0]):
        assert not _positional(outside), outside
        assert _texts(outside) == [json.dumps(v) for v in outside]


def test_without_msgspec_the_texts_are_each_numbers_own(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A list msgspec refuses (a value a release cannot encode) falls back to ``str``: the
    same lines, from every path that encodes a list with msgspec (a lone in-range float is
    always encoded)."""
    encode = jsonl_lines._encode

    def refuse(values: object) -> bytes:
        if isinstance(values, list):
            raise TypeError("refused")
        return encode(values)

    m = ForwardPassMetrics(worker_id=0, duration_ms=5.25, var_decode_kv_tokens=3.5,
                           var_prefill_length=0.25, num_decode_requests=2)
    base = {a.name: getattr(m, a.name) for a in ForwardPassMetrics.__attrs_attrs__
            if a.name not in ("counter_id", "num_decode_requests", "sum_decode_kv_tokens",
                              "var_decode_kv_tokens", "duration_ms")}
    runs = [FpmRun(base, 4, [1, 2, 2], [3, 9, 11], [0.5, 0.5, 0.5], [1.25, 2.0, 0.0]),
            FpmRun(base, 4, [1, 2, 2], [3, 9, 11], [0.0, -0.0, 2.5], [1.25, 2.0, 3.0]),
            FpmRun(base, 9, [1], [3], [0.75], [1.5])]
    batch = [RemovedRun(3, 0, [2**64 - 1, 8, 2**70]), StoredRun(6, 0, 5, [9, 10, 11], [1, 2, 3])]
    got = []
    for patched in (False, True):
        if patched:
            monkeypatch.setattr(jsonl_lines, "_encode", refuse)
        lines = [fpm_line(1, 12.5, m), kv_event_lines(2, 7.25, batch)]
        for run in runs:
            ats = [10.0 + j for j in range(len(run))]
            lines += fpm_run_lines(1, ats, run)
            assert fpm_run_lines(1, ats, run) == [
                json.dumps(fpm_record(1, a, p)) + "\n" for a, p in zip(ats, run, strict=True)]
        got.append(lines)
    assert got[0] == got[1]
    assert got[0][1] == "".join(json.dumps(kv_event_record(2, 7.25, e)) + "\n"
                                for e in materialise(batch))


def test_int_list_is_json_dumps_of_the_list() -> None:
    for values in ([], [7], [2**64 - 1, 0], [2**64 - 1, 1, 2, 3], [-(2**63), 2**64, 2**80, 5],
                   list(range(100)), [18446744073709551615] * 9):
        assert _int_list(values) == json.dumps(values)
    assert _int_list((1, 2, 3)) == "[1, 2, 3]"  # a tuple is joined


def test_single_times_and_durations_at_the_edges_are_written_as_json_writes_them() -> None:
    """One float alone (a batch's time, a pass's wall time) also goes through msgspec when in
    range: every edge value, as a KV batch's time, an FPM line's time and duration, and a
    one-pass run's."""
    batch = [RemovedRun(3, 0, [7, 8]), StoredRun(5, 0, None, [9], [10])]
    for x in EDGES:
        want = "".join(json.dumps(kv_event_record(2, x, e)) + "\n" for e in materialise(batch))
        assert kv_event_lines(2, x, batch) == want
        for dur in (x, 1.0):
            if abs(dur) > 1e300:  # its duration in ms would overflow
                continue
            m = ForwardPassMetrics(worker_id=0, duration_ms=abs(dur) * 1000.0,
                                   var_decode_kv_tokens=abs(x))
            assert fpm_line(1, x, m) == json.dumps(fpm_record(1, x, m)) + "\n"
            base = {a.name: getattr(m, a.name) for a in ForwardPassMetrics.__attrs_attrs__
                    if a.name not in ("counter_id", "num_decode_requests", "sum_decode_kv_tokens",
                                      "var_decode_kv_tokens", "duration_ms")}
            run = FpmRun(base, 0, [1], [2], [abs(x)], [abs(dur) * 1000.0])
            assert fpm_run_lines(1, [x], run) == [json.dumps(fpm_record(1, x, run[0])) + "\n"]


def test_multi_pass_runs_with_an_edge_value_in_any_column_are_written_as_json_writes_them() -> None:
    """A run of several passes encodes all its values at once only when every float is
    msgspec's as well: an edge value in the wall times, the variances (shared or not) or the
    times must give each pass's own line either way."""
    m = ForwardPassMetrics(worker_id=0, var_prefill_length=0.5)
    base = {a.name: getattr(m, a.name) for a in ForwardPassMetrics.__attrs_attrs__
            if a.name not in ("counter_id", "num_decode_requests", "sum_decode_kv_tokens",
                              "var_decode_kv_tokens", "duration_ms")}
    for x in EDGES:
        if abs(x) > 1e300:  # its duration in ms would overflow
            continue
        y = abs(x)
        cases = [
            ([2.5, y * 1000.0, 3.0], [0.25, 0.25, 0.25], [10.0, 11.5, 13]),
            ([2.5, 2.0, 3.0], [y, y, y], [10.0, 11.5, 12.0]),
            ([2.5, 2.0, 3.0], [0.0, y, 1.5], [10.0, 11.5, 12.0]),
            ([2.5, 2.0, 3.0], [0.5, 0.5, 0.5], [10.0, x, 12]),
        ]
        for durations, variances, ats in cases:
            run = FpmRun(base, 7, [1, 2, 3], [100, 200, 300], variances, durations)
            assert fpm_run_lines(3, ats, run) == [
                json.dumps(fpm_record(3, a, p)) + "\n" for a, p in zip(ats, run, strict=True)], (x, ats)
