"""docs/timing.md's calibration tables are what ``benchmarks/aic_table.py`` prints: the script
replays the documented deployment, runs ``servesim calibrate`` with both models and draws the
page's calibration figure from the same fitted models."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("aic_table", ROOT / "benchmarks" / "aic_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_calibration_tables_are_the_scripts(tmp_path):
    passes, predicted, printed = _script().calibrate(str(tmp_path))
    page = (ROOT / "docs" / "timing.md").read_text()
    assert printed in page
    assert sorted(predicted) == ["interpolated", "polynomial"]
    assert all(len(v) == len(passes) for v in predicted.values())
    # The counts the figure's legend shows are the ones the tables print.
    kinds = {k: sum(p.kind == k for p in passes) for k in ("prefill", "decode", "mixed")}
    table = dict(re.findall(r"^(prefill|decode|mixed) +(\d+) ", printed, re.M))
    assert {k: int(v) for k, v in table.items()} == kinds
