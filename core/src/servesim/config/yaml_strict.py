"""PyYAML with servesim's two changes: a repeated key is an error, and every exponent form
(``1e3``) is a float. Imported only when a config file is read or a ``--set`` value is not a
simple scalar (``servesim.config.yaml_io``)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from servesim.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` semantics, except a key repeated in one mapping is an error
    (PyYAML silently keeps the last one, which hides typos in long configs)."""


class _FastStrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """:class:`_StrictLoader` on libyaml's parser where PyYAML has it, 3-5x faster on a long
    config. Its syntax errors word and place some problems differently, so a document it
    refuses is read again by :class:`_StrictLoader` for the error the user sees."""


_SQUASHED = re.compile(r"([A-Za-z_][\w.]*):(\S.*)")


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, value_node in node.value:
        # Merge keys (``<<: *anchor``) may legitimately repeat keys; only explicit ones count.
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node, deep=deep)
        squashed = _SQUASHED.fullmatch(key) if isinstance(key, str) else None
        if squashed and isinstance(value_node, yaml.ScalarNode) and value_node.tag.endswith(":null"):
            # {type:lfu} is one key 'type:lfu' with no value; no servesim key has a colon
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found the key {key!r} with no value; put a space after the colon "
                f"({squashed.group(1)}: {squashed.group(2)})",
                key_node.start_mark,
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


for _loader in (_StrictLoader, _FastStrictLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# PyYAML follows YAML 1.1, where an exponent needs a dot and a sign: ``1e3`` and ``1.5e3``
# would be *strings* and ``arrival_speedup_ratio: 1e3`` a type error. Read every exponent
# form as a float, as YAML 1.2 and JSON do.
_EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
for _loader in (_StrictLoader, _FastStrictLoader):
    _loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+.0123456789"))


#: The most values a config may hold once its aliases are expanded, and the deepest nesting.
#: A real config holds hundreds; aliases that name aliases double at every level (an "alias
#: bomb"), and everything that reads a config walks the expanded form.
MAX_VALUES = 100_000
MAX_DEPTH = 64


def _check_bounds(data: Any, source: str) -> None:
    """Refuse data whose expansion exceeds :data:`MAX_VALUES` or :data:`MAX_DEPTH`, or that
    contains itself (a recursive alias). Linear in the parsed document: a value shared
    through an alias is sized once."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_ids: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, (dict, list)):
            continue
        key = id(value)
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        if done:
            open_ids.discard(key)
            inner = [c for c in children if isinstance(c, (dict, list))]
            sizes[key] = 1 + len(children) + sum(sizes[id(c)] - 1 for c in inner)
            depths[key] = 1 + max((depths[id(c)] for c in inner), default=0)
            if sizes[key] > MAX_VALUES:
                raise ConfigError(f"the config holds more than {MAX_VALUES:,} values once its YAML "
                                  "aliases are expanded (limit MAX_VALUES)", source=source)
            if depths[key] > MAX_DEPTH:
                raise ConfigError(f"the config nests deeper than {MAX_DEPTH} levels (limit MAX_DEPTH)",
                                  source=source)
            continue
        if key in sizes:
            continue
        if key in open_ids:
            raise ConfigError("a YAML alias refers to a value that contains it", source=source)
        open_ids.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))


def _load(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_FastStrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (raises the same error, worded as PyYAML does)


def parse_yaml(text: str, source: str, *, lines: bool = True) -> Any:
    """Parse YAML text; syntax errors name ``source:line`` (``lines=False``: ``source``).
    The result is bounded in expanded size and depth (:func:`_check_bounds`)."""
    try:
        data = _load(text)
        _check_bounds(data, source)
        return data
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None and lines else source
        detail = " ".join(p for p in (exc.context, exc.problem) if p)
        col = f" (column {mark.column + 1})" if mark is not None and lines else ""
        raise ConfigError(f"invalid YAML: {detail}{col}", source=where) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None
    except ValueError as exc:  # an integer longer than Python converts (sys.int_max_str_digits)
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


__all__ = ["parse_yaml"]
