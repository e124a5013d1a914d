"""Run many oracle jobs in one process of the oracle venv (vLLM's import costs ~15 s; each
further ``vllm_sched_trace.main`` call costs well under a second).

    ORACLE_PYTHON oracle_batch.py SCRIPT JOBS.json

``JOBS.json`` is a list of argv lists for ``vllm_sched_trace.main``. Runs under the oracle's
Python (no servesim imports); a line ``done N`` on stderr marks each finished job.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys


def main() -> int:
    script, jobs_path = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("vllm_sched_trace", script)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(jobs_path) as f:
        jobs = json.load(f)
    for i, argv in enumerate(jobs):
        with contextlib.redirect_stdout(io.StringIO()):
            mod.main(argv)
        print(f"done {i}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
