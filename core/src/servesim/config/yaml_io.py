"""Reading config YAML and applying ``--set a.b=value`` overrides to the raw data."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from servesim.config.converter import show
from servesim.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` semantics, except a key repeated in one mapping is an error
    (PyYAML silently keeps the last one, which hides typos in long configs)."""


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


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# PyYAML follows YAML 1.1, where an exponent needs a dot and a sign: ``1e3`` and ``1.5e3``
# would be *strings* and ``arrival_speedup_ratio: 1e3`` a type error. Read every exponent
# form as a float, as YAML 1.2 and JSON do.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def parse_yaml(text: str, source: str, *, lines: bool = True) -> Any:
    """Parse YAML text; syntax errors name ``source:line`` (``lines=False``: ``source``)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None and lines else source
        detail = " ".join(p for p in (exc.context, exc.problem) if p)
        col = f" (column {mark.column + 1})" if mark is not None and lines else ""
        raise ConfigError(f"invalid YAML: {detail}{col}", source=where) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


def read_yaml(path: str) -> Any:
    """The parsed contents of a YAML file (an empty file is ``{}``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", source=path) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file is not UTF-8 text: {exc.reason}", source=path) from None
    data = parse_yaml(text, path)
    return {} if data is None else data


def merge_files(paths: Sequence[str]) -> tuple[Any, dict[str, str]]:
    """The YAML files merged in order: mappings merge key by key, anything else (a list, a
    scalar) is replaced by the later file's value. Returns the merged data and, for every key
    a later file set, the file it came from (so an error names the file that set the key).
    A later ``engine.timing_model`` naming a different ``type`` replaces the earlier model's
    options instead of mixing two models'."""
    merged: Any = read_yaml(paths[0])
    origins: dict[str, str] = {}
    for path in paths[1:]:
        data = read_yaml(path)
        if not isinstance(data, dict) or not isinstance(merged, dict):
            merged = data
            continue
        _merge_into(merged, data, "", path, origins)
    return merged, origins


def _merge_into(base: dict[str, Any], over: dict[str, Any], prefix: str, source: str,
                origins: dict[str, str]) -> None:
    for key, value in over.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        prev = base.get(key)
        switch = path.endswith("timing_model") and isinstance(value, dict) and isinstance(prev, dict) \
            and "type" in value and value["type"] != prev.get("type", "polynomial")
        if isinstance(value, dict) and isinstance(prev, dict) and not switch:
            _merge_into(prev, value, path, source, origins)
        else:
            base[key] = value
            origins[path] = source


_INDEXED = re.compile(r"([^\[\]]+)((?:\[\d+\])+)")
_INDEX = re.compile(r"\[(\d+)\]")


def parse_set(item: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` → ``(["a", "b"], value)``; the value is parsed as YAML (``64`` is an
    int, ``null`` is None, ``fifo`` a string); an empty value is null."""
    source = f"--set {item}"
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not p.strip() for p in parts):
        raise ConfigError(
            f"expected KEY=VALUE with a dotted key like engine.max_num_seqs=64, got {item!r}", source="--set"
        )
    value = parse_yaml(text, source, lines=False) if text.strip() else None
    return [q for p in parts for q in _split_indexes(p.strip(), item)], value


def _split_indexes(part: str, item: str) -> list[str]:
    """``pools[0]`` → ``["pools", "0"]``: the key paths errors print work in ``--set``."""
    if "[" not in part and "]" not in part:
        return [part]
    match = _INDEXED.fullmatch(part)
    if match is None:
        raise ConfigError(f"expected KEY or KEY[N] in a dotted key, got {part!r}", source=f"--set {item}")
    return [match.group(1), *_INDEX.findall(match.group(2))]


def _index(container: Any, part: str, parts: list[str], path: str, item: str) -> str | int:
    """``part`` as a key of a mapping or an in-range index of a list."""
    if isinstance(container, dict):
        return part
    if part.isdigit() and int(part) < len(container):
        return int(part)
    raise ConfigError(
        f"cannot set {'.'.join(parts)}: {path} is a list of {len(container)}; "
        f"use an index below {len(container)} or set the whole list",
        path=path,
        source=f"--set {item}",
    )


def apply_sets(raw: dict[str, Any], sets: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Apply ``--set`` items to ``raw`` in order, creating intermediate mappings.

    A numeric part indexes an existing list (``sinks.kv_events.0.path=...``, or
    ``sinks.kv_events[0].path=...`` as errors print it). Returns key
    path → the ``--set`` item that set it, so errors can name the flag.
    """
    origins: dict[str, str] = {}
    for item in sets:
        parts, value = parse_set(item)
        node: Any = raw
        path = ""
        for part in parts[:-1]:
            key = _index(node, part, parts, path, item)
            path = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)
            child = node[key] if isinstance(key, int) else node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, (dict, list)):
                raise ConfigError(
                    f"cannot set {'.'.join(parts)}: {path} is {show(child)}, not a mapping",
                    path=path,
                    source=f"--set {item}",
                )
            node = child
        key = _index(node, parts[-1], parts, path, item)
        node[key] = value
        full = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else key)
        origins[full] = f"--set {item}"
    return origins
