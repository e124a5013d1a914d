"""Installed-looking plugins for tests: a module built from source text, exported through the
entry points of a fake distribution, so discovery, error attribution (the module a frame
belongs to) and ``plugin NAME from DIST`` messages work as for a real install."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
import types

import pytest

VERSION = "0.3"


class _Dist:
    def __init__(self, name: str, eps: dict[str, str]) -> None:
        self.metadata = {"Name": name}
        self.version = VERSION
        self.entry_points = [importlib.metadata.EntryPoint(n, v, "servesim") for n, v in eps.items()]


def install(
    monkeypatch: pytest.MonkeyPatch, name: str, source: str, dist: str = "fake-dist"
) -> types.ModuleType:
    """Make ``source`` the module ``name``, the entry point ``name`` of distribution ``dist``."""
    mod = types.ModuleType(name)
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), mod.__dict__)  # noqa: S102
    monkeypatch.setitem(sys.modules, name, mod)
    real = list(importlib.metadata.distributions())
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [*real, _Dist(dist, {name: name})])
    return mod


def fail(main_args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI expecting exit status 2 with one error line; return that line."""
    from servesim.cli.main import main

    assert main(main_args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("servesim: error: "), err
    return err[len("servesim: error: ") : -1]
