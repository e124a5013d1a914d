"""The ``servesim_add_commands`` hook: plugin subcommands, their dispatch, and the errors that
name the plugin and its distribution. Fake distributions as in test_plugins.py."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import types
from typing import Any

import pytest
from servesim import hookimpl
from servesim.cli.main import main
from servesim.errors import ConfigError


class _Dist:
    def __init__(self, name: str, eps: dict[str, str]) -> None:
        self.metadata = {"Name": name}
        self.version = "0.3"
        self.entry_points = [importlib.metadata.EntryPoint(n, v, "servesim") for n, v in eps.items()]


def _install(monkeypatch: pytest.MonkeyPatch, module: str, add_commands: Any) -> None:
    mod = types.ModuleType(module)
    mod.servesim_add_commands = hookimpl(add_commands)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, mod)
    real = list(importlib.metadata.distributions())
    monkeypatch.setattr(
        importlib.metadata, "distributions", lambda: [*real, _Dist("greet-dist", {"greet": module})]
    )


def test_plugin_command_runs_and_returns_its_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def add(subparsers: argparse._SubParsersAction) -> None:
        p = subparsers.add_parser("greet", help="say hello")
        p.add_argument("who")
        p.set_defaults(servesim_command=lambda args: print(f"hello {args.who}") or 7)

    _install(monkeypatch, "fake_greet", add)
    assert main(["greet", "world"]) == 7
    assert capsys.readouterr().out == "hello world\n"
    assert main(["--help"]) == 0
    assert "greet" in capsys.readouterr().out


def test_plugin_command_user_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise ConfigError("expected a number", path="greet.count", source="g.yaml")

    def add(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser("greet").set_defaults(servesim_command=fail)

    _install(monkeypatch, "fake_greet2", add)
    assert main(["greet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: g.yaml: greet.count")


def test_clash_with_builtin_names_the_plugin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def add(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser("validate").set_defaults(servesim_command=lambda a: 0)

    _install(monkeypatch, "fake_clash", add)
    assert main(["greet"]) == 2
    err = capsys.readouterr().err
    assert "plugin 'greet' (greet-dist 0.3) failed in servesim_add_commands" in err
    assert "validate" in err


def test_command_without_function_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def add(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser("greet")

    _install(monkeypatch, "fake_nofunc", add)
    assert main(["greet"]) == 2
    assert "added command 'greet' without set_defaults(servesim_command=func)" in capsys.readouterr().err


def test_builtin_commands_do_not_load_plugin_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    def add(subparsers: argparse._SubParsersAction) -> None:
        raise AssertionError("a built-in command must not call servesim_add_commands")

    _install(monkeypatch, "fake_unused", add)
    assert main(["plugins", "--json"]) == 0
