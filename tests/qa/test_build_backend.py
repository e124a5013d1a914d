"""The in-tree build backend (core/_build/servesim_build.py) asks for what an isolated
compiled build needs, and for nothing extra in a plain build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BACKEND = Path(__file__).resolve().parents[2] / "core" / "_build" / "servesim_build.py"


@pytest.fixture()
def backend(monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("servesim_build_under_test", BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # setuptools' own requirements (it runs setup.py) are not what these tests pin
    monkeypatch.setattr(module._setuptools, "get_requires_for_build_wheel", lambda cs=None: ["wheel"])
    monkeypatch.setattr(module._setuptools, "get_requires_for_build_editable", lambda cs=None: ["wheel"])
    return module


def test_a_plain_build_asks_for_no_mypy(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVESIM_COMPILE", raising=False)
    for hook in (backend.get_requires_for_build_wheel, backend.get_requires_for_build_editable):
        assert hook(None) == ["wheel"]


def test_a_compiled_build_asks_for_mypy_and_attrs(backend, monkeypatch: pytest.MonkeyPatch) -> None:
    # mypy's attrs plugin needs the attrs package in the (isolated) build environment, or the
    # contract's attrs classes type-check without their generated __init__ and the build fails.
    monkeypatch.setenv("SERVESIM_COMPILE", "1")
    for hook in (backend.get_requires_for_build_wheel, backend.get_requires_for_build_editable):
        assert hook(None) == ["wheel", "mypy>=1.10", "attrs>=23.1"]


def test_every_plugin_ships_the_same_build_backend() -> None:
    """A plugin that compiles carries the backend in its own folder (its sdist builds without
    files outside it), byte for byte the file core uses."""
    root = BACKEND.parents[2]
    copies = sorted(p for p in (root / "plugins").glob("*/_build/servesim_build.py"))
    assert [p.parts[-3] for p in copies] == ["sglang", "trtllm", "vllm"]
    for copy in copies:
        assert not copy.parent.is_symlink() and not copy.is_symlink()
        assert copy.read_bytes() == BACKEND.read_bytes(), copy
