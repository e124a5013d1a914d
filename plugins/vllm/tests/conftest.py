"""Make ``vllm_helpers`` importable under ``--import-mode=importlib``; shared fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from vllm_helpers import RecordingTiming  # noqa: E402


@pytest.fixture
def timing() -> RecordingTiming:
    return RecordingTiming()
