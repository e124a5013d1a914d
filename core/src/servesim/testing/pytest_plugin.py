"""pytest plugin (entry point ``pytest11: servesim``) offering fixtures to backend authors.

Fixtures:

* ``plugin_manager`` — a fresh servesim plugin manager with entry-point autoloading off, so a
  test registers exactly the plugins it names (skips if the plugin system is unavailable).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def plugin_manager() -> Iterator[Any]:
    try:
        from servesim.plugins import make_plugin_manager  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - the plugin system lands separately
        pytest.skip("servesim.plugins.make_plugin_manager is not available")
    try:
        pm = make_plugin_manager(autoload=False)
    except TypeError:  # pragma: no cover - older signature without the switch
        pm = make_plugin_manager()
    yield pm
