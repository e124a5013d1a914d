"""Request bodies decode as the stdlib's ``json`` decodes them: same values, same refusals,
same error messages (msgspec decodes, the stdlib decides what msgspec refuses)."""

from __future__ import annotations

import json

import pytest
from servesim_serve.protocol import ApiError, parse_json

ACCEPTED = [
    b'{"prompt": [4, 5, 6], "max_tokens": 3, "stream": true, "stream_options": null}',
    b'{"a": 1, "a": 2}',  # the last of a repeated key
    b'{"big": 123456789012345678901234567890, "neg": -9223372036854775809, "u": 18446744073709551615}',
    b'{"f": [0.1, 1e22, -0.0, 1E2, 1.5e-400, 123456789.123456789e5], "z": -0}',
    b'{"nan": NaN, "inf": Infinity, "ninf": -Infinity, "huge": 1e400}',  # the stdlib's extensions
    b'{"s": "\\u00e9\\ud83d\\ude00", "tab": "\\t"}',  # a surrogate pair is one character
    b'\xef\xbb\xbf{"bom": 1}',
    '{"utf16": "\u00e9"}'.encode("utf-16"),
    b' \n{"ws": true}\r\n ',
]
REFUSED = [b"", b"{not json", b'{"a": 1}x', b'{"a": 01}', b'{"a": .5}', b'{"a": "\x01"}', b'{"a": "\xff"}',
           b'{"a": [1, 2}', b"[" * 100_000 + b"]" * 100_000]


@pytest.mark.parametrize("raw", ACCEPTED)
def test_values_are_the_stdlib_ones(raw: bytes) -> None:
    got, want = parse_json(raw), json.loads(raw)
    assert repr(got) == repr(want)  # repr: NaN equals nothing, -0.0 equals 0
    assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


@pytest.mark.parametrize("raw", REFUSED)
def test_refusals_carry_the_stdlib_message(raw: bytes) -> None:
    with pytest.raises(ApiError) as info:
        parse_json(raw)
    try:
        json.loads(raw)
    except (ValueError, RecursionError) as exc:
        assert info.value.message == f"invalid JSON in the request body: {exc}"
        assert info.value.status == 400 and info.value.err_type == "BadRequestError"
    else:
        raise AssertionError("the stdlib accepted it")


@pytest.mark.parametrize("raw", [b'{"lone": "\\ud800"}', b'{"m": [{"role": "\\udfff", "content": "x"}]}',
                                 b'{"nan": NaN, "s": "a\\udc00b"}'])
def test_a_lone_surrogate_is_refused(raw: bytes) -> None:
    """The stdlib decodes it into a str no UTF-8 can carry; msgspec refuses it."""
    with pytest.raises(ApiError) as info:
        parse_json(raw)
    assert info.value.status == 400 and info.value.err_type == "BadRequestError"
    assert info.value.message.startswith("invalid Unicode in the request body: a lone surrogate (\\u")


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"x"', b"3", b"null"])
def test_a_body_that_is_not_an_object_is_refused(raw: bytes) -> None:
    with pytest.raises(ApiError, match="the request body must be a JSON object"):
        parse_json(raw)
