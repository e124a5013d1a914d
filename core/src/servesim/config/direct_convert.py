"""Config structuring and unstructuring without cattrs, for the values that need nothing else.

Importing cattrs and generating its structuring functions for the config classes cost more
CPU than the rest of a short replay's configuration. Most configs hold only what a direct
reading handles: mappings of known keys whose values are plain scalars, enum values, string
mappings or nested sections. :class:`LazyConverter` structures those itself and hands
anything else to the cattrs converter of :func:`servesim.config.converter.make_converter`,
built on first need. Every value the direct reading declines, and every value that is wrong,
goes through cattrs, so error messages are cattrs' (flattened as before).

The direct reading gives what cattrs gives, field by field (``tests/core/test_fast_convert.py``
compares the two on the defaults and on the repository's config files):

* ``int``: an ``int`` (not a ``bool``) as it is; ``float``: an ``int`` or ``float`` through
  ``float()``; ``bool``; ``str``; ``Any``: the value as it is;
* ``dict[str, Any]``: a mapping with string keys, copied into a ``dict``;
  ``str | dict[str, Any]``: either;
* an enum: the member whose value equals the value and has its type;
* ``X | None``: None, or the value read as ``X``;
* an attrs class: a mapping read field by field, every key a field that ``__init__`` takes
  under its own name, fields left out taking their defaults.

Anything else (lists, tuples, other unions, unknown keys, a missing required key, a class
whose ``__init__`` raises) declines the whole value. Unstructuring (the report's resolved
configuration) writes an attrs object's ``__init__`` fields under their names, an enum as
its value, mappings and sequences item by item and scalars as they are, and declines objects
of other kinds and nested attrs objects of a class other than the field's.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Mapping
from types import NoneType, UnionType
from typing import Any

import attrs


class _Miss(Exception):
    """The direct reading declines; cattrs decides."""


_MISS = _Miss()
_NAME_OR_MAPPING = str | dict[str, Any]
_STR_MAPPING = dict[str, Any]
_fields: dict[type, dict[str, Any] | None] = {}


def _field_hints(cl: type) -> dict[str, Any] | None:
    """``{init argument name: type}`` of an attrs class, or None if its annotations cannot be
    resolved (cattrs then reports or copes)."""
    if cl in _fields:
        return _fields[cl]
    try:
        hints = typing.get_type_hints(cl)
        out: dict[str, Any] | None = {
            f.name: hints[f.name] for f in attrs.fields(cl) if f.init and f.alias == f.name
        }
    except Exception:  # noqa: BLE001 - cattrs decides
        out = None
    _fields[cl] = out
    return out


def _value(value: Any, hint: Any) -> Any:
    if hint is int:
        if type(value) is int:
            return value
    elif hint is float:
        if type(value) is float or type(value) is int:
            return float(value)
    elif hint is bool:
        if type(value) is bool:
            return value
    elif hint is str:
        if type(value) is str:
            return value
    elif hint is Any:
        return value
    elif hint == _STR_MAPPING:
        if isinstance(value, Mapping) and all(type(k) is str for k in value):
            return dict(value)
    elif hint == _NAME_OR_MAPPING:
        if type(value) is str:
            return value
        if isinstance(value, Mapping) and all(type(k) is str for k in value):
            return dict(value)
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if member.value == value and type(member.value) is type(value):
                return member
    elif isinstance(hint, type) and attrs.has(hint):
        return _attrs(value, hint)
    elif isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        if len(args) == 2 and NoneType in args:
            if value is None:
                return None
            return _value(value, args[0] if args[1] is NoneType else args[1])
    raise _MISS


def _attrs(value: Any, cl: type) -> Any:
    if not isinstance(value, Mapping):
        raise _MISS
    hints = _field_hints(cl)
    if hints is None:
        raise _MISS
    kwargs = {}
    for key, item in value.items():
        hint = hints.get(key) if type(key) is str else None
        if hint is None:
            raise _MISS
        kwargs[key] = _value(item, hint)
    try:
        return cl(**kwargs)
    except Exception:  # noqa: BLE001 - a missing key or a validator: cattrs reports it
        raise _MISS from None


def _plain(value: Any, hint: Any) -> Any:
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(kind):
        if isinstance(hint, type) and attrs.has(hint) and hint is not kind:
            raise _MISS
        fields = attrs.fields(kind)
        if any(not f.init or f.alias != f.name for f in fields):
            raise _MISS
        return {f.name: _plain(getattr(value, f.name), _hint_of(kind, f.name)) for f in fields}
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise _MISS
        return {k: _plain(v, Any) for k, v in value.items()}
    if kind is list or kind is tuple:
        args = typing.get_args(hint)
        item = args[0] if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis) else Any
        return kind(_plain(v, item) for v in value)
    raise _MISS


def _hint_of(cl: type, name: str) -> Any:
    hints = _field_hints(cl)
    if hints is None:
        raise _MISS
    return hints.get(name, Any)


def structure(value: Any, cl: type) -> Any:
    """``value`` read as ``cl`` directly (see the module docs); raises :class:`_Miss`
    when the direct reading declines."""
    return _value(value, cl)


class LazyConverter:
    """``structure`` and ``unstructure`` read directly where they can, else by the cattrs
    converter built on first need (:attr:`cattrs`)."""

    __slots__ = ("_conv",)

    def __init__(self) -> None:
        self._conv: Any = None

    @property
    def cattrs(self) -> Any:
        if self._conv is None:
            from servesim.config.converter import make_converter

            self._conv = make_converter()
        return self._conv

    def structure(self, value: Any, cl: Any) -> Any:
        try:
            return _value(value, cl)
        except _Miss:
            return self.cattrs.structure(value, cl)

    def unstructure(self, obj: Any) -> Any:
        try:
            return _plain(obj, type(obj))
        except _Miss:
            return self.cattrs.unstructure(obj)
