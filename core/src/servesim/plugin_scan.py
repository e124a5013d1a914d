"""The installed ``servesim`` entry points, read from a cache when nothing that decides them
has changed.

Finding entry points means importing :mod:`importlib.metadata` and opening the metadata of
every installed distribution, which costs more CPU than the rest of a short replay's
start-up. The answer depends only on the distributions ``importlib.metadata`` finds on
``sys.path``, so it is cached in a JSON file (``$SERVESIM_CACHE_DIR``, else
``$XDG_CACHE_HOME/servesim``, else ``~/.cache/servesim``; one file per Python environment,
holding its latest eight answers and the environment's interpreter; a new file removes those
whose interpreter no longer exists, so deleted virtual environments leave nothing behind)
together with a fingerprint of exactly what the search reads:

* ``sys.path``, each entry made absolute;
* per directory on it, the names of its ``*.dist-info`` and ``*.egg-info`` entries, and for
  each of those the size and modification time (nanoseconds) of the entry itself, its
  ``entry_points.txt``, ``METADATA`` and ``PKG-INFO``;
* per other file on it (a zip archive), its size and modification time.

Installing, upgrading or removing a distribution adds, renames or removes its metadata
directory, and editing an ``entry_points.txt`` changes its size or time, so any of these
changes the fingerprint and the next run scans again. The cache is not used when a finder on
``sys.meta_path`` other than the standard path finder can supply distributions, when
``importlib.metadata.distributions`` has been replaced (tests inject fake distributions that
way), when a ``sys.path`` entry is an egg, or when ``SERVESIM_PLUGIN_CACHE=0``. A cache file
that cannot be read or written is ignored.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

CACHE_ENV = "SERVESIM_PLUGIN_CACHE"
CACHE_DIR_ENV = "SERVESIM_CACHE_DIR"
_FORMAT = 2
_KEEP = 8

Record = tuple[str, str, str, str]
"""``(entry-point name, value, distribution name, distribution version)``."""


def _stat(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def fingerprint() -> list[Any] | None:
    """What ``importlib.metadata`` reads to find distributions (see the module docs), or
    None when the cache must not be used."""
    if os.environ.get(CACHE_ENV, "1") == "0":
        return None
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return None
    loaded = sys.modules.get("importlib.metadata")
    if loaded is not None:
        fn = getattr(loaded, "distributions", None)
        if getattr(fn, "__module__", None) != "importlib.metadata" or (
                getattr(fn, "__qualname__", None) != "distributions"):
            return None
    out: list[Any] = []
    for entry in sys.path:
        root = entry or "."
        where = os.path.abspath(root)
        if where.lower().endswith(".egg"):
            return None
        if not os.path.isdir(root):
            out.append([where, _stat(root)])
            continue
        try:
            names = sorted(n for n in os.listdir(root)
                           if n.lower().endswith((".dist-info", ".egg-info")))
        except OSError:
            out.append([where, "unreadable"])
            continue
        metas = []
        for name in names:
            meta = os.path.join(root, name)
            metas.append([name, _stat(meta), _stat(os.path.join(meta, "entry_points.txt")),
                          _stat(os.path.join(meta, "METADATA")),
                          _stat(os.path.join(meta, "PKG-INFO"))])
        out.append([where, metas])
    return out


def cache_file() -> str:
    """This environment's cache file."""
    import binascii

    base = os.environ.get(CACHE_DIR_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "servesim")
    tag = binascii.crc32(f"{sys.prefix}\0{sys.executable}".encode()) & 0xFFFFFFFF
    return os.path.join(base, f"entry-points-{tag:08x}.json")


def scan(group: str) -> tuple[list[Record], str]:
    """Every entry point of ``group`` in ``importlib.metadata.distributions()`` order, and
    the version of the ``servesim`` distribution."""
    import importlib.metadata

    out: list[Record] = []
    for dist in list(importlib.metadata.distributions()):
        info: tuple[str, str] | None = None  # METADATA is parsed only for matching ones
        for ep in dist.entry_points:
            if ep.group != group:
                continue
            if info is None:
                meta = dist.metadata
                info = ((meta["Name"] if meta is not None else None) or "<unknown>",
                        dist.version or "?")
            out.append((ep.name, ep.value, info[0], info[1]))
    try:
        version = importlib.metadata.version("servesim")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a tree
        version = "0+unknown"
    return out, version


def entry_points(group: str) -> tuple[list[Record], str]:
    """:func:`scan`, from the cache when its fingerprint still holds."""
    fp = fingerprint()
    if fp is None:
        return scan(group)
    memo = _memo.get(group)
    if memo is not None and memo[0] == fp:
        return memo[1]
    found = _cached(group, fp)
    _memo[group] = (fp, found)
    return found


_memo: dict[str, tuple[list[Any], tuple[list[Record], str]]] = {}


def _cached(group: str, fp: list[Any]) -> tuple[list[Record], str]:
    """The answer for ``fp`` from the cache file, else a scan, which is added to the file
    (its latest ``_KEEP`` answers: a console script and ``python -m`` differ in ``sys.path[0]``)."""
    path = cache_file()
    entries: list[Any] = []
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if data.get("format") == _FORMAT:
            entries = list(data["entries"])
        for entry in entries:
            if entry["group"] == group and entry["fingerprint"] == fp:
                return [tuple(r) for r in entry["records"]], entry["version"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        entries = []
    records, version = scan(group)
    new_file = not os.path.exists(path)
    entries = [{"group": group, "fingerprint": fp, "records": records, "version": version},
               *entries][:_KEEP]
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"format": _FORMAT, "executable": sys.executable, "entries": entries}, fh)
        os.replace(tmp, path)
    except OSError:
        return records, version
    if new_file:
        _prune(os.path.dirname(path), path)
    return records, version


def _prune(folder: str, keep: str) -> None:
    """Remove the cache files of environments whose interpreter no longer exists (files
    without a recorded interpreter are kept; anything unreadable is left alone)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        other = os.path.join(folder, name)
        if not (name.startswith("entry-points-") and name.endswith(".json")) or other == keep:
            continue
        try:
            with open(other, encoding="utf-8") as fh:
                executable = json.load(fh).get("executable")
            if isinstance(executable, str) and not os.path.exists(executable):
                os.remove(other)
        except (OSError, ValueError, AttributeError):
            continue


def load(value: str) -> Any:
    """The object an entry point's ``value`` (``module:attr.attr [extras]``) names, as
    ``importlib.metadata.EntryPoint.load`` finds it."""
    import importlib
    import re

    match = re.match(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$",
                     value)
    if match is None:
        raise ValueError(f"malformed entry point value {value!r}")
    obj: Any = importlib.import_module(match.group("module"))
    for attr in filter(None, (match.group("attr") or "").split(".")):
        obj = getattr(obj, attr)
    return obj


__all__ = ["CACHE_DIR_ENV", "CACHE_ENV", "cache_file", "entry_points", "fingerprint", "load",
           "scan"]
