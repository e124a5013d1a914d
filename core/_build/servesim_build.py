"""PEP 517 build backend: setuptools, plus an opt-in mypyc compilation of the hot modules.

``pip install ./core`` builds a pure-Python distribution exactly as plain setuptools does.
With ``SERVESIM_COMPILE=1`` in the environment the backend asks for mypy as an extra build
requirement and ``setup.py`` compiles the modules its pyproject lists under
``[tool.servesim-build] compile`` with mypyc; the ``.py`` sources ship beside the extension
modules. Each distribution that compiles ships its own copy of this file in ``_build/``, so
its sdist builds on its own, and the flag means the same everywhere
(tests/qa/test_build_backend.py keeps the copies identical).
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the PEP 517 hooks this backend does not change)

#: The mypy release whose mypyc the compiled build is tested with.
MYPY_REQUIREMENT = "mypy>=1.10"
#: What mypy must import to type the compiled modules: its attrs plugin reads the attrs
#: package itself (without it an isolated build sees attrs classes with no ``__init__``).
COMPILE_REQUIREMENTS = [MYPY_REQUIREMENT, "attrs>=23.1"]


def compiling() -> bool:
    """Whether this build compiles (``SERVESIM_COMPILE=1``)."""
    return os.environ.get("SERVESIM_COMPILE", "") == "1"


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = COMPILE_REQUIREMENTS if compiling() else []
    return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = COMPILE_REQUIREMENTS if compiling() else []
    return [*_setuptools.get_requires_for_build_editable(config_settings), *extra]


def _building() -> bool:
    """Whether setup.py runs a build command (not a metadata or requirements query, which
    would otherwise pay for mypyc's whole analysis each time)."""
    return any(arg.startswith(("bdist", "build", "editable", "install")) for arg in sys.argv[1:])


def ext_modules(project: Path | str = ".") -> list[Any]:
    """The mypyc extension modules for ``setup.py``: none unless compiling.

    Paths in ``[tool.servesim-build] compile`` are relative to the distribution's ``src``.
    """
    if not compiling() or not _building():
        return []
    root = Path(project)
    config = tomllib.loads((root / "pyproject.toml").read_text())
    modules = config["tool"]["servesim-build"]["compile"]
    from mypyc.build import mypycify

    # A plugin's modules are type-checked against core's sources (this file's real home is
    # core/_build), so calls into core compile with their declared types.
    core_src = Path(__file__).resolve().parent.parent / "src"
    os.environ["MYPYPATH"] = os.pathsep.join(
        p for p in (str(core_src), os.environ.get("MYPYPATH", "")) if p)
    paths = [str(Path("src") / m) for m in modules]
    # Modules that stay interpreted are read for their types only: their own type errors (and
    # libraries without stubs) do not stop the build.
    flags = ["--follow-imports=silent", "--ignore-missing-imports"]
    return mypycify([*flags, *paths], opt_level=os.environ.get("SERVESIM_COMPILE_OPT", "3"))
