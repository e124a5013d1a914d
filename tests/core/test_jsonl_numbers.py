"""servesim.jsonl_lines turns long lists of numbers into text with msgspec: the texts must be
exactly what ``json.dumps`` (``repr``) writes, and lists whose floats msgspec writes
differently keep their numbers."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.jsonl_lines import MIN_ENCODED, POSITIONAL, _int_list, number_texts

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
