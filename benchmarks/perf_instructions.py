"""Instruction counts of one replay, for machines whose CPU time drifts (``bench_sinks.py
--instructions``).

A child (``perf_child.py``) runs under ``valgrind --tool=callgrind``, which counts the
instructions the process executes. The same child is run a second time with
:data:`NO_REPLAY` set, which makes it stop after loading its configuration; the difference
between the two counts is what :func:`servesim.replay.runner.simulate` executes (reading the
trace, building the cluster and replaying it), as the CPU times of ``bench_sinks.py`` cover.
Both children get ``PYTHONHASHSEED=0``, so that string hashing, and with it the layout of
string-keyed dicts, is the same in every run: repeated counts then agree to well under one
percent. A count says nothing about cache misses or branch predictions, so a ratio of counts
is a floor under the ratio of times rather than the same figure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

#: The environment variable that makes ``perf_child.py`` stop before the replay (set to ``1``).
NO_REPLAY = "SERVESIM_BENCH_NO_REPLAY"

_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


class CountError(RuntimeError):
    """A counted child failed, or valgrind's output held no count."""


def valgrind() -> str | None:
    """The ``valgrind`` executable on ``PATH``, or None."""
    return shutil.which("valgrind")


def collected(stderr: str) -> int:
    """The instruction count in callgrind's summary (its last ``Collected`` line)."""
    found = _COLLECTED.findall(stderr)
    if not found:
        raise CountError("no instruction count in valgrind's output")
    return int(found[-1])


def count(cmd: Sequence[str], env: dict[str, str], timeout: float | None = None) -> int:
    """Instructions that ``cmd`` executes under callgrind, with environment ``env``."""
    tool = valgrind()
    if tool is None:
        raise CountError("valgrind is not on PATH")
    proc = subprocess.run([tool, "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                          capture_output=True, text=True, check=False, env=env, timeout=timeout)
    if proc.returncode != 0:
        tail = [line for line in proc.stderr.splitlines() if not line.startswith("==")][-1:]
        raise CountError(tail[0] if tail else f"exit status {proc.returncode}")
    return collected(proc.stderr)


def replay_count(cmd: Sequence[str], env: dict[str, str] | None = None,
                 timeout: float | None = None) -> int:
    """Instructions of ``cmd``'s replay: its count less that of the same command stopped
    before the replay (:data:`NO_REPLAY`). The two run side by side."""
    base = {**(os.environ if env is None else env), "PYTHONHASHSEED": "0"}
    base.pop(NO_REPLAY, None)
    with ThreadPoolExecutor(max_workers=2) as pool:
        full = pool.submit(count, cmd, base, timeout)
        start = pool.submit(count, cmd, {**base, NO_REPLAY: "1"}, timeout)
        return full.result() - start.result()


__all__ = ["NO_REPLAY", "CountError", "collected", "count", "replay_count", "valgrind"]
