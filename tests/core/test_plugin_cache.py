"""The entry-point cache (servesim.plugin_scan): the same answer as a scan, and a new scan
whenever a distribution is installed, changed or removed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
from pathlib import Path

import pytest
from servesim import plugin_scan
from servesim.plugins import ENTRY_POINT_GROUP, make_plugin_manager


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(plugin_scan.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(plugin_scan.CACHE_ENV, raising=False)
    monkeypatch.setattr(plugin_scan, "_memo", {})
    return tmp_path / "cache"


def _install(site: Path, dist: str, version: str, eps: dict[str, str]) -> Path:
    """A distribution's metadata as pip writes it (no module files needed to be found)."""
    meta = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{n} = {v}\n" for n, v in eps.items())
    (meta / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    return meta


def _names(records: list[plugin_scan.Record]) -> list[tuple[str, str, str, str]]:
    return sorted(r for r in records if r[2].startswith("cache-test"))


def test_the_cache_holds_what_a_scan_finds(cache: Path) -> None:
    first = plugin_scan.entry_points(ENTRY_POINT_GROUP)
    assert first == plugin_scan.scan(ENTRY_POINT_GROUP)
    (path,) = cache.iterdir()
    (entry,) = json.loads(path.read_text())["entries"]
    assert entry["records"] == [list(r) for r in first[0]] and entry["version"] == first[1]
    plugin_scan._memo.clear()
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == first  # read back from the file
    # Every installed plugin is found: the vLLM backend among them.
    assert any(r[0] == "vllm" and r[2] == "servesim-vllm" for r in first[0])


def test_installs_changes_and_removals_are_seen(cache: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    before = plugin_scan.entry_points(ENTRY_POINT_GROUP)
    assert _names(before[0]) == []
    meta = _install(site, "cache-test-a", "1.0", {"cta": "cta_mod"})
    assert _names(plugin_scan.entry_points(ENTRY_POINT_GROUP)[0]) == [
        ("cta", "cta_mod", "cache-test-a", "1.0")]
    # An entry_points.txt edited in place (same directory entries): seen too.
    (meta / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ncta = cta_mod:plugin\n"
                                           "ctb = ctb_mod\n")
    stat = (meta / "entry_points.txt").stat()
    os.utime(meta / "entry_points.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    assert _names(plugin_scan.entry_points(ENTRY_POINT_GROUP)[0]) == [
        ("cta", "cta_mod:plugin", "cache-test-a", "1.0"), ("ctb", "ctb_mod", "cache-test-a", "1.0")]
    # An upgrade renames the metadata directory.
    meta.rename(site / "cache_test_a-2.0.dist-info")
    (site / "cache_test_a-2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cache-test-a\nVersion: 2.0\n")
    assert {r[3] for r in _names(plugin_scan.entry_points(ENTRY_POINT_GROUP)[0])} == {"2.0"}
    # Removed: gone, and the answer is the one from before the install.
    for child in (site / "cache_test_a-2.0.dist-info").iterdir():
        child.unlink()
    (site / "cache_test_a-2.0.dist-info").rmdir()
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == before


def test_a_replaced_distributions_function_is_never_answered_from_the_cache(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin_scan.entry_points(ENTRY_POINT_GROUP)  # fills the cache
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [])
    assert plugin_scan.fingerprint() is None
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP)[0] == []


def test_a_broken_cache_file_is_rescanned_and_the_switch_turns_it_off(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = plugin_scan.scan(ENTRY_POINT_GROUP)
    cache.mkdir(parents=True)
    Path(plugin_scan.cache_file()).write_text("{not json")
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == want
    assert json.loads(Path(plugin_scan.cache_file()).read_text())["entries"][0]["version"] == want[1]
    monkeypatch.setenv(plugin_scan.CACHE_ENV, "0")
    assert plugin_scan.fingerprint() is None


def test_the_file_keeps_several_search_paths(cache: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A console script and ``python -m`` see different ``sys.path[0]``: both stay cached."""
    first = plugin_scan.entry_points(ENTRY_POINT_GROUP)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == first
    entries = json.loads(Path(plugin_scan.cache_file()).read_text())["entries"]
    assert len(entries) == 2 and entries[0]["fingerprint"] != entries[1]["fingerprint"]
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [])  # a scan would see this
    monkeypatch.setattr(plugin_scan, "fingerprint", lambda: entries[1]["fingerprint"])
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == first  # from the file, no scan


def test_an_unwritable_cache_folder_is_ignored(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(plugin_scan.CACHE_DIR_ENV, str(blocker / "below"))
    monkeypatch.setattr(plugin_scan, "_memo", {})
    assert plugin_scan.entry_points(ENTRY_POINT_GROUP) == plugin_scan.scan(ENTRY_POINT_GROUP)


def test_cached_and_scanned_managers_register_the_same_plugins(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def plugins() -> list[tuple[str, str]]:
        pm = make_plugin_manager()
        return sorted((n, str(pm.distribution_of(n))) for n, _ in pm.list_name_plugin())

    cached = plugins()
    plugin_scan._memo.clear()
    assert plugins() == cached  # the second from the file
    monkeypatch.setenv(plugin_scan.CACHE_ENV, "0")
    assert plugins() == cached


def test_entry_point_values_load_as_importlib_loads_them() -> None:
    ep = importlib.metadata.EntryPoint("x", "servesim.plugins:Plugins.registry", "servesim")
    assert plugin_scan.load(ep.value) is ep.load()
    assert plugin_scan.load("servesim.builtins.kv [extra]") is (
        importlib.metadata.EntryPoint("y", "servesim.builtins.kv [extra]", "servesim").load())
    with pytest.raises(ValueError, match="malformed"):
        plugin_scan.load("not a value!")


def test_a_new_cache_file_removes_those_of_environments_that_are_gone(cache: Path) -> None:
    cache.mkdir(parents=True)
    gone = cache / "entry-points-00000001.json"
    gone.write_text(json.dumps({"format": 2, "executable": str(cache / "no-such-venv" / "python"),
                                "entries": []}))
    alive = cache / "entry-points-00000002.json"
    alive.write_text(json.dumps({"format": 2, "executable": sys.executable, "entries": []}))
    older = cache / "entry-points-00000003.json"  # written before files named their interpreter
    older.write_text(json.dumps({"format": 2, "entries": []}))
    broken = cache / "entry-points-00000004.json"
    broken.write_text("{not json")
    unrelated = cache / "notes.json"
    unrelated.write_text(json.dumps({"executable": str(cache / "gone")}))
    plugin_scan.entry_points(ENTRY_POINT_GROUP)
    mine = Path(plugin_scan.cache_file())
    assert json.loads(mine.read_text())["executable"] == sys.executable
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [mine.name, alive.name, older.name, broken.name, unrelated.name])
    # an existing file is rewritten without pruning again
    gone.write_text(json.dumps({"format": 2, "executable": str(cache / "gone2"), "entries": []}))
    plugin_scan._memo.clear()  # noqa: SLF001
    os.utime(mine, None)
    plugin_scan._cached("another-group", plugin_scan.fingerprint())  # noqa: SLF001
    assert gone.exists()
