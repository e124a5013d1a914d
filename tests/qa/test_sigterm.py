"""SIGTERM ends ``servesim run`` as Ctrl-C does: one line, exit status 143 (128 + SIGTERM), no
traceback, no report, sink files left as ``PATH.partial`` that end with whole lines (an earlier
``PATH`` untouched), and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def test_sigterm_during_a_run_is_one_line_and_status_143(tmp_path: Path) -> None:
    kv, report = tmp_path / "kv.jsonl", tmp_path / "report.json"
    kv.write_text("an earlier run's events\n")
    partial = tmp_path / "kv.jsonl.partial"
    argv = [sys.executable, "-c", "import sys; from servesim.cli.main import console; sys.exit(console())",
            "run", "--quiet", "--output-json", str(report), "--set", "workload.synthetic.num_requests=100000",
            "--set", f"sinks.kv_events=[{{type: jsonl, path: {kv}}}]", "--set", "sinks.writer=inline"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 100_000):  # the replay is writing events
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert out == ""
    assert err == ("servesim: terminated by SIGTERM; the run did not finish (no report was written, "
                   "and the sink files and pass log written so far are left as PATH.partial, with "
                   "whole lines)\n")
    assert not report.exists()
    assert kv.read_text() == "an earlier run's events\n"
    lines = partial.read_text().splitlines()
    assert lines and all(json.loads(line) for line in lines[-3:])
    try:
        os.killpg(proc.pid, 0)  # any process left in the run's session?
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("a process of the run outlived it")
