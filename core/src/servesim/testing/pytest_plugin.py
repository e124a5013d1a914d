"""pytest plugin (entry point ``pytest11: servesim``) offering fixtures to backend authors.

Fixtures:

* ``plugin_manager`` — a fresh servesim plugin manager with entry-point autoloading off, so a
  test registers exactly the plugins it names on top of core's built-ins;
* ``plugins`` — a :class:`servesim.plugins.Plugins` facade over that manager (registries by
  kind: ``plugins.backends().get("mine")``).

Use :func:`servesim.testing.check_rank_conformance` or subclass
:class:`servesim.testing.RankConformance` to run the contract's invariants on a rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def plugin_manager() -> Iterator[Any]:
    from servesim.plugins import make_plugin_manager

    yield make_plugin_manager(autoload=False)


@pytest.fixture
def plugins(plugin_manager: Any) -> Any:
    from servesim.plugins import Plugins

    return Plugins(plugin_manager)
