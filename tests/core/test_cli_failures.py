"""Inputs that used to end in a traceback now end in one error line (found by QA)."""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim.cli.main import main


def _err(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_overflowing_timing_is_a_simulation_failure(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([
        "run", "--quiet",
        "--set", "engine.timing_model={type: fixed, prefill_ms: 1e308, decode_ms: 1e308}",
        "--set", "workload.synthetic.num_requests=3",
    ])
    lines = _err(capsys)
    assert rc == 1
    assert len(lines) == 1
    assert lines[0].startswith("servesim: error: simulation failed: engine 0 is now poisoned")


def test_tiny_arrival_speedup_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "--quiet", "--set", "workload.arrival_speedup_ratio=1e-300"])
    lines = _err(capsys)
    assert rc == 2
    assert lines == [
        "servesim: error: --set workload.arrival_speedup_ratio=1e-300: "
        "workload.arrival_speedup_ratio: expected a finite number >= 1e-6, got 1e-300"
    ]


def test_garbage_npz_profile_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "profile.npz"
    bad.write_bytes(b"not a zip file")
    rc = main(["run", "--quiet", "--set",
               f"engine.timing_model={{type: interpolated, profile: {bad}}}"])
    lines = _err(capsys)
    assert rc == 2
    assert len(lines) == 1
    assert "engine.timing_model.profile" in lines[0]
    assert "cannot read profile: not a readable NPZ file" in lines[0]
