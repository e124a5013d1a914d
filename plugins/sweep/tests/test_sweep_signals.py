"""SIGTERM or SIGINT ends ``servesim sweep --parallel 2`` with one line, exit status 128 + the
signal, every worker (and multiprocessing's resource tracker) gone, and the point files on
disk complete (written through a temporary name), ready for ``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SERVESIM = [sys.executable, "-c", "import sys; from servesim.cli.main import main; sys.exit(main())"]
WAIT_S = 60.0

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc for the process tree")


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry))
    return found


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_sweep_and_every_worker(tmp_path, sig) -> None:
    # one quick point, then three that take far longer than the test
    (tmp_path / "base.yaml").write_text("workload: {synthetic: {num_requests: 20, rate: 100}}\n")
    (tmp_path / "sweep.yaml").write_text(
        "base: base.yaml\ngrid:\n  workload.synthetic.num_requests: [20, 2000000, 2000001, 2000002]\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([*SERVESIM, "sweep", str(tmp_path / "sweep.yaml"), "--out", str(out),
                             "--parallel", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        points = out / "points"
        wait_for(lambda: points.is_dir() and any(points.glob("*.json")), "the quick point")
        # the sweep, the resource tracker and two workers
        wait_for(lambda: len(session_members(proc.pid)) >= 4, "both workers")
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C: the whole foreground group gets it
        else:
            proc.send_signal(sig)
        _out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig
    assert err == (f"servesim: error: interrupted by {name}: 1 of 4 points complete in {points} "
                   "(servesim sweep --resume runs the rest)\n")
    # the workers were reaped before the sweep exited; the tracker follows once its pipe closes
    wait_for(lambda: not session_members(proc.pid), "every process of the sweep to end")
    files = sorted(p.name for p in points.iterdir())
    assert len(files) == 1 and files[0].endswith(".json")  # no temporary file left
    record = json.loads((points / files[0]).read_text())
    assert record["status"] == "ok" and record["overrides"] == {"workload.synthetic.num_requests": 20}
    assert not (out / "results.csv").exists()
