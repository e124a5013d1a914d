"""The one cattrs converter servesim configs go through, and its error flattening.

style-anchors.md rule 9: a converter built by a factory (never ``cattrs.global_converter``)
with ``forbid_extra_keys=True`` and ``detailed_validation=True``. Scalars are structured
strictly: cattrs' defaults call ``int(x)``/``float(x)``/``str(x)``, which would quietly turn
``max_num_seqs: 2.7`` into 2 or ``enable_prefix_caching: "no"`` into True; a config typo
should be an error instead. Enums are structured by value.

:func:`flatten_errors` walks cattrs' validation exception groups the way
``cattrs.transform_error`` does, but keeps each path as data (``engine.max_num_seqs`` rather
than ``$.engine.max_num_seqs``) and renders an unknown key as its own path.
"""

from __future__ import annotations

import enum
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

if typing.TYPE_CHECKING:
    import cattrs

Problem = tuple[str, str]
"""``(key_path, message)``; the message names the bad value and what was expected."""


class InvalidValue(ValueError):
    """Raised by servesim's structure hooks; the message is already user-facing.

    ``field`` names the attribute of the class being structured that the problem is about,
    when a class-level validator reported it (the key path then ends in that field).
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _validator_error(cl: type, exc: Exception) -> InvalidValue:
    """A user-facing error from an exception raised by a class's attrs validators.

    attrs' own validators pass ``(message, Attribute, ...)``; hand-written ones usually
    start their message with the field name. Either way the field joins the key path.
    """
    args = exc.args
    names = {a.name for a in attrs.fields(cl)}
    if len(args) >= 2 and isinstance(args[1], attrs.Attribute):
        return InvalidValue(str(args[0]), args[1].name)
    message = str(exc)
    first = message.split(" ", 1)[0].strip("'\"`:")
    return InvalidValue(message, first if first in names else None)


def show(value: Any) -> str:
    """A short rendering of a config value for error messages."""
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(value: Any, _t: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValue(f"expected an integer, got {show(value)}")
    return value


def _float(value: Any, _t: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValue(f"expected a number, got {show(value)}")
    return float(value)


def _bool(value: Any, _t: type) -> bool:
    if not isinstance(value, bool):
        raise InvalidValue(f"expected true or false, got {show(value)}")
    return value


def _str(value: Any, _t: type) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"expected a string, got {show(value)}")
    return value


def _mapping(value: Any, _t: type) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidValue(f"expected a mapping, got {show(value)}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise InvalidValue(f"expected string keys, got {show(bad[0])}")
    return dict(value)


def _name_or_mapping(value: Any, _t: Any) -> str | dict[str, Any]:
    """A plugin chosen by name or as ``{type: NAME, ...options}`` (engine.eviction_policy)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return _mapping(value, dict)
    raise InvalidValue(f"expected a name or a mapping {{type: NAME, ...options}}, got {show(value)}")


def _enum_factory(cl: type[enum.Enum]) -> Callable[[Any, type], enum.Enum]:
    values = [m.value for m in cl]

    def structure(value: Any, _t: type) -> enum.Enum:
        for member in cl:
            if member.value == value and type(member.value) is type(value):
                return member
        choices = ", ".join(repr(v) for v in values)
        raise InvalidValue(f"expected one of {choices}, got {show(value)}")

    return structure


def make_converter() -> cattrs.Converter:
    """A fresh converter: unknown keys forbidden, detailed validation, strict scalars."""
    import cattrs
    from cattrs.gen import make_dict_structure_fn

    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(int, _int)
    conv.register_structure_hook(float, _float)
    conv.register_structure_hook(bool, _bool)
    conv.register_structure_hook(str, _str)
    conv.register_structure_hook_func(lambda t: t == dict[str, Any], _mapping)
    conv.register_structure_hook_func(lambda t: t == (str | dict[str, Any]), _name_or_mapping)
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _enum_factory
    )
    conv.register_unstructure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), lambda _t: lambda e: e.value
    )

    def attrs_factory(cl: type) -> Callable[[Any, type], Any]:
        inner: Callable[[Any, Any], Any] = make_dict_structure_fn(cl, conv, _cattrs_forbid_extra_keys=True)
        sequences = _sequence_fields(cl)

        def structure(value: Any, t: type) -> Any:
            if not isinstance(value, Mapping):
                raise InvalidValue(f"expected a mapping, got {show(value)}")
            for name, size, optional in sequences:
                # cattrs would iterate a mapping's keys or a string's characters.
                item = value.get(name)
                if name not in value or (optional and item is None):
                    continue
                if not isinstance(item, (list, tuple)):
                    raise InvalidValue(f"expected a list, got {show(item)}", name)
                if size is not None and len(item) != size:
                    raise InvalidValue(f"expected a list of {size} items, got {show(item)}", name)
            try:
                return inner(value, t)
            except (ValueError, TypeError) as exc:
                # Raised by the class's own attrs validators, after every field structured.
                raise _validator_error(cl, exc) from None

        return structure

    conv.register_structure_hook_factory(attrs.has, attrs_factory)
    return conv


def _sequence_fields(cl: type) -> tuple[tuple[str, int | None, bool], ...]:
    """Fields of ``cl`` typed as a list or tuple (whose value must be a YAML sequence), or
    such a type ``| None``: ``(name, length of a fixed-length tuple or None, optional)``."""
    try:
        hints = typing.get_type_hints(cl)
    except Exception:  # noqa: BLE001 - an unresolvable annotation just skips the check
        return ()
    out = []
    for f in attrs.fields(cl):
        hint = hints.get(f.name)
        args = typing.get_args(hint)
        optional = type(None) in args and len(args) == 2
        if optional:
            hint = next(a for a in args if a is not type(None))
        if hint in (list, tuple) or typing.get_origin(hint) in (list, tuple):
            items = typing.get_args(hint)
            fixed = typing.get_origin(hint) is tuple and items and Ellipsis not in items
            out.append((f.name, len(items) if fixed else None, optional))
    return tuple(out)


def join_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def unknown_key_message(key: str, allowed: list[str], extra: str = "") -> str:
    """``unknown key; did you mean 'x'? expected one of: ...``."""
    import difflib  # only for a key that is wrong: a valid config never loads it

    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    expected = f"; expected one of: {', '.join(allowed)}" if allowed else "; this section takes no keys"
    return f"unknown key{hint}{expected}{extra}"


def _describe(exc: BaseException, typ: type | None) -> str:
    if isinstance(exc, InvalidValue):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required key missing"
    from cattrs.v import format_exception

    if typ is None and isinstance(exc, (ValueError, TypeError)) and str(exc):
        # An attrs validator of the class itself: its message is the best description.
        return str(exc)
    return format_exception(exc, typ)


def flatten_errors(exc: BaseException, path: str = "") -> list[Problem]:
    """Every leaf problem of a cattrs structuring error, with plain dotted paths."""
    from cattrs.errors import (
        AttributeValidationNote,
        ClassValidationError,
        ForbiddenExtraKeysError,
        IterableValidationError,
    )

    if isinstance(exc, ForbiddenExtraKeysError):
        allowed = sorted(a.name for a in attrs.fields(exc.cl)) if attrs.has(exc.cl) else []
        return [(join_path(path, k), unknown_key_message(k, allowed)) for k in sorted(exc.extra_fields)]
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        with_notes, without = exc.group_exceptions()
        out: list[Problem] = []
        for sub, note in with_notes:
            key: str | int = note.name if isinstance(note, AttributeValidationNote) else note.index
            sub_path = join_path(path, key)
            if isinstance(sub, (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError)):
                out.extend(flatten_errors(sub, sub_path))
            elif isinstance(sub, InvalidValue) and sub.field:
                out.append((join_path(sub_path, sub.field), str(sub)))
            else:
                out.append((sub_path, _describe(sub, note.type)))
        for sub in without:
            if isinstance(exc, ClassValidationError) and isinstance(sub, (ValueError, TypeError)):
                if not isinstance(sub, InvalidValue) and attrs.has(exc.cl):
                    sub = _validator_error(exc.cl, sub)
            out.extend(flatten_errors(sub, path))
        return out
    if isinstance(exc, InvalidValue) and exc.field:
        return [(join_path(path, exc.field), str(exc))]
    return [(path, _describe(exc, None))]


def structure_at(conv: Any, data: Any, cl: type, path: str) -> tuple[Any, list[Problem]]:
    """Structure ``data`` as ``cl`` (by a cattrs converter or a
    :class:`~servesim.config.direct_convert.LazyConverter`); on failure return
    ``(None, problems)`` under ``path``."""
    try:
        return conv.structure(data, cl), []
    except Exception as exc:
        if isinstance(exc, InvalidValue):
            return None, flatten_errors(exc, path)
        from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

        if isinstance(exc, (ClassValidationError, IterableValidationError, ForbiddenExtraKeysError)):
            return None, flatten_errors(exc, path)
        raise


def is_finite(value: float) -> bool:
    return math.isfinite(value)
