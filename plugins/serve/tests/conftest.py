"""Fixtures for the servesim-serve tests; makes ``serve_helpers`` importable under
``--import-mode=importlib``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from servesim_serve.testing import running

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def serve() -> Callable[..., Any]:
    """``with serve(["key=value", ...]) as s:``: a running server (``s.url``, ``s.server``)."""
    return running
