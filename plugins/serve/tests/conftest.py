"""Fixtures for the servesim-serve tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from servesim_serve.testing import running


@pytest.fixture
def serve() -> Callable[..., Any]:
    """``with serve(["key=value", ...]) as s:``: a running server (``s.url``, ``s.server``)."""
    return running
