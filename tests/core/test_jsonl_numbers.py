"""servesim.jsonl_lines turns long lists of numbers into text with msgspec: the texts must be
exactly what ``json.dumps`` (``repr``) writes, and lists whose floats msgspec writes
differently keep their numbers."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import ForwardPassMetrics
from servesim.fpm_runs import FpmRun
from servesim.jsonl_lines import (
    MIN_ENCODED,
    POSITIONAL,
    _int_list,
    fpm_line,
    fpm_run_lines,
    kv_event_lines,
    number_texts,
)
from servesim.kv.event_records import RemovedRun, StoredRun, materialise
from servesim.sinks_builtin import fpm_record, kv_event_record

finite = st.floats(allow_nan=False, allow_infinity=False)
ints = st.integers(-(2**70), 2**70)
LOW, HIGH = POSITIONAL
#: Floats at and next to the ends of the positional range, and values msgspec writes
#: differently from ``repr`` (exponents outside the range, both signs).
EDGES = [0.0, -0.0, LOW, math.nextafter(LOW, 0.0), math.nextafter(LOW, 1.0), HIGH,
         math.nextafter(HIGH, 0.0), 1e-5, 2.5e-5, 5e-324, 1.7976931348623157e308, 1e16, 1e17,
         123456789012345.0, 1234567890123456.0, 0.1, 100.0]
EDGES += [-x for x in EDGES]


def _as_written(values: list) -> list[str]:
    """What a ``%s`` fill writes for each item ``number_texts`` returns (a text, or the number)."""
    return ["%s" % v for v in number_texts(values)]


@settings(max_examples=400, derandomize=True)
@given(st.lists(st.one_of(finite, ints, st.sampled_from(EDGES)), max_size=12))
def test_number_texts_write_what_json_writes(values: list) -> None:
    assert _as_written(values) == [json.dumps(v) for v in values]


def test_each_edge_float_is_written_as_json_writes_it() -> None:
    for x in EDGES:
        for values in ([x] * MIN_ENCODED, [1.5, x, 2.5], [x, 0.0, 7.0]):
            assert _as_written(values) == [json.dumps(v) for v in values], values


def test_lists_in_the_positional_range_are_encoded_and_others_keep_their_numbers() -> None:
    inside = [0.0, -0.0, LOW, 39.583057, 0.005843231000000003, math.nextafter(HIGH, 0.0), 12, -3.5]
    got = number_texts(inside)
    assert got == ["0.0", "-0.0", "0.0001", "39.583057", "0.005843231000000003",
                   "9999999999999998.0", "12", "-3.5"]
    for outside in ([1.0, 2.0, 1e-5], [1.0, 2.0, HIGH], [-HIGH, 1.0, 2.0], [5e-324, 1.0, 2.0]):
        assert number_texts(outside) is outside
    short = [0.1] * (MIN_ENCODED - 1)
    assert number_texts(short) is short


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
