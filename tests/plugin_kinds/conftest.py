"""Make this folder's helpers (``fake_plugins``) importable under ``--import-mode=importlib``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
