"""``--set`` values read without PyYAML (servesim.config.yaml_io.plain_value) are exactly what
PyYAML reads: the same value and the same type, on every value the fast path accepts."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from servesim.config.yaml_io import _MISSING, parse_set, plain_value
from servesim.config.yaml_strict import parse_yaml

EDGES = ["0", "-0", "+0", "00", "012", "0x1F", "0o7", "0b101", "1_000", "1:20", "64", "-64",
         "+64", "1.5", "-1.5", "+1.5", "-0.0", "1.", ".5", "1.5e3", "1e3", "1.0E+3", ".inf",
         "-.inf", ".nan", "nan", "inf", "true", "True", "TRUE", "tRue", "yes", "Yes", "no", "NO",
         "on", "Off", "y", "n", "Y", "null", "Null", "NULL", "nULL", "~", "fifo", "round_robin",
         "a-b", "a.b", "e5", "_x", "vllm", "2001-12-14", "2001-12-14t21:59:43.10-05:00", '"x"',
         '"/tmp/a b.jsonl"', "'x'", "'it''s'", '"a\\nb"', '"\\u00e9"', "=", "<<", "a: b", "[1, 2]",
         "{a: 1}", "- x", "#c", "x #c", " 64", "64 ", "&a x", "*a", "!!str 5", "|", ">", "?",
         "%x", "@x", "`x`", "1e", "1.2.3", "0.1.2", "-", "+", "."]

alphabet = st.sampled_from(list("0123456789+-._eExabo:~ntruefalsyONTF\"'/ \\#"))


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)  # type: ignore[arg-type]
    return a == b


@settings(max_examples=3000, derandomize=True, deadline=None)
@given(st.text(alphabet, min_size=1, max_size=8))
@example("0")
def test_plain_values_are_pyyamls(text: str) -> None:
    fast = plain_value(text)
    if fast is _MISSING:
        return
    assert _same(fast, parse_yaml(text, "t", lines=False)), text


def test_edge_values() -> None:
    accepted = 0
    for text in EDGES:
        fast = plain_value(text)
        if fast is _MISSING:
            continue
        accepted += 1
        assert _same(fast, parse_yaml(text, "t", lines=False)), text
    assert accepted >= 40


def test_parse_set_uses_pyyaml_for_the_rest() -> None:
    assert parse_set("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_set("a=1e3") == (["a"], 1000.0)
    assert parse_set('a="/tmp/t.jsonl"') == (["a"], "/tmp/t.jsonl")
    assert parse_set("a=") == (["a"], None)
