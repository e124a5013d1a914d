"""A full disk (``/dev/full``) on stdout or on an output file is one line and a non-zero exit,
never a traceback, and a failed report write leaves the previous report whole."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.cli.main import main

SMALL = ["--set", "workload.synthetic.num_requests=5"]


@pytest.mark.parametrize("argv", [["run", *SMALL], ["run", "--json", *SMALL], ["validate"], ["plugins"]],
                         ids=["run", "run-json", "validate", "plugins"])
def test_a_full_stdout_is_one_line_and_exit_1(argv: list[str]) -> None:
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "servesim.cli.main", *argv], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == "servesim: error: cannot write the output: No space left on device\n"


def test_a_full_pass_log_is_one_line_and_exit_1() -> None:
    out = subprocess.run([sys.executable, "-m", "servesim.cli.main", "run", "--pass-log", "/dev/full",
                          "--quiet", *SMALL], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("servesim: error: pass log /dev/full: cannot write at ")
    assert out.stderr.endswith(" ms: No space left on device\n") and out.stderr.count("\n") == 1


def test_a_failed_report_write_keeps_the_previous_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    assert main(["run", "--quiet", "--output-json", str(report), *SMALL]) == 0
    good = report.read_bytes()

    def full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    assert main(["run", "--quiet", "--output-json", str(report), *SMALL,
                 "--set", "workload.seed=7"]) == 2
    assert capsys.readouterr().err == f"servesim: error: cannot write {report}: No space left on device\n"
    assert report.read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left


def test_sink_files_and_the_pass_log_are_partial_until_the_run_ends_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fpm, passes = tmp_path / "fpm.jsonl", tmp_path / "passes.jsonl"
    argv = ["run", "--quiet", "--pass-log", str(passes), *SMALL,
            "--set", f"sinks.fpm=[{{type: jsonl, path: {fpm}}}]", "--set", "sinks.writer=inline"]
    assert main(argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fpm.jsonl", "passes.jsonl"]
    first_fpm, first_passes = fpm.read_bytes(), passes.read_bytes()
    assert first_fpm.count(b"\n") == first_passes.count(b"\n") > 5
    # The same run, with a KV-event sink on a full device: it fails at its first write.
    assert main([*argv, "--set", "sinks.kv_events=[{type: jsonl, path: /dev/full}]"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert fpm.read_bytes() == first_fpm and passes.read_bytes() == first_passes
    partial = tmp_path / "fpm.jsonl.partial"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fpm.jsonl", "fpm.jsonl.partial", "passes.jsonl", "passes.jsonl.partial"]
    assert first_fpm.startswith(partial.read_bytes())  # what was written before the failure
