"""Reading config YAML and applying ``--set a.b=value`` overrides to the raw data."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from servesim.config.converter import show
from servesim.errors import ConfigError


def parse_yaml(text: str, source: str, *, lines: bool = True) -> Any:
    """Parse YAML text; syntax errors name ``source:line`` (``lines=False``: ``source``).
    (:func:`servesim.config.yaml_strict.parse_yaml`, which imports PyYAML.)"""
    from servesim.config.yaml_strict import parse_yaml as parse

    return parse(text, source, lines=lines)


# ``--set`` values PyYAML would read as a plain int, float, bool, null or string, read without
# PyYAML (a run with no config file and simple overrides does not import it). Anything else,
# or anything these patterns might read differently from PyYAML, goes to PyYAML; a test
# compares the two on many values (tests/core/test_set_values.py).
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_QUOTED = re.compile(r'"[ !#-\[\]-~]*"|\'[ -&(-~]*\'')
_WORDS: dict[str, Any] = {
    **dict.fromkeys(["yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"], True),
    **dict.fromkeys(["no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"], False),
    **dict.fromkeys(["null", "Null", "NULL"], None),
}
_MISSING = object()


def plain_value(text: str) -> Any:
    """What PyYAML (YAML 1.1, :mod:`servesim.config.yaml_strict`) makes of ``text`` when it
    is a simple scalar (a decimal int, a float with a dot and no exponent, a bool or null
    word, a name, a quoted printable-ASCII string without escapes), else ``_MISSING``."""
    if _INT.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts: parse_yaml says so in one line
            return _MISSING
    if _FLOAT.fullmatch(text):
        return float(text)
    if _WORD.fullmatch(text):
        return _WORDS.get(text, text)
    if text == "~":
        return None
    if _QUOTED.fullmatch(text):
        return text[1:-1]
    return _MISSING


#: The largest config file read (a config is kilobytes; ``/dev/zero`` would never end).
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_yaml(path: str) -> Any:
    """The parsed contents of a YAML file (an empty file is ``{}``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_CONFIG_BYTES + 1)
        if len(text) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB "
                              "(limit MAX_CONFIG_BYTES)", source=path)
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
    value = plain_value(text) if text.strip() else None
    if value is _MISSING:
        value = parse_yaml(text, source, lines=False)
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
