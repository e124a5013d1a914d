"""Run one command in its own process and read its peak memory from the kernel.

Each simulator run is a fresh child reaped with :func:`os.wait4`, so ``ru_maxrss`` is that
child's own high-water mark (Linux reports KiB) and nothing the benchmark itself allocated,
nor an earlier run, can leak into it. Output goes to temporary files, not pipes, so a chatty
child can never block on a full pipe while the parent waits.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence

from attrs import frozen


@frozen
class Measured:
    """Exit code, process wall seconds, peak RSS in MiB, and the captured streams."""

    returncode: int
    process_wall_s: float
    peak_rss_mib: float
    stdout: str
    stderr: str
    timed_out: bool = False


def run_measured(cmd: Sequence[str], timeout_s: float | None = None,
                 env: dict[str, str] | None = None) -> Measured:
    """Run ``cmd`` to completion (killed after ``timeout_s``) and measure it."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, env=env)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill) if timeout_s else None
        if timer is not None:
            timer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            if timer is not None:
                timer.cancel()
        wall = time.perf_counter() - started
        # wait4 reaped the child; tell Popen so it does not try again.
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Measured(proc.returncode, wall, usage.ru_maxrss / 1024.0, out.read(), err.read(),
                        killed.is_set())
