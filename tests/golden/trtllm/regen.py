"""Regenerate the trtllm golden files from the reference (Dynamo's mocker, ``engine_type: trtllm``).

Run by hand, never by the tests (CI has no reference):

    python tests/golden/trtllm/regen.py [CASE ...]

Each case directory holds ``trace.jsonl`` (Mooncake, from /work/shared/tools/make_trace.py
with ``--block-size 64``) and ``config.json`` (``{"engine": {...}}`` with the reference's
engine-argument names, which are also servesim's ``engine:`` names). This script runs
``peer_dynamo.py`` with ``trace_block_size=64`` and writes ``expected.json``: per request,
sorted by arrival, ``[arrival_ms, first_token_ms, terminal_time_ms, output_length,
reused_input_tokens, terminal_status]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

PEER = "/work/shared/tools/peer_dynamo.py"
HERE = Path(__file__).resolve().parent
FIELDS = [
    "arrival_time_ms",
    "first_token_ms",
    "terminal_time_ms",
    "output_length",
    "reused_input_tokens",
    "terminal_status",
]


def regen(case: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        cmd = [
            sys.executable,
            PEER,
            str(case / "trace.jsonl"),
            "-c",
            str(case / "config.json"),
            "--set",
            "engine_type=trtllm",
            "--set",
            "trace_block_size=64",
            "--set",
            f"report_jsonl_path={report}",
        ]
        summary = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda d: d["arrival_time_ms"])
    expected = {
        "reference": f"{summary['peer']} {summary['version']} engine_type=trtllm",
        "fields": FIELDS,
        "completed_requests": summary["completed_requests"],
        "requests": [[d[f] for f in FIELDS] for d in rows],
    }
    text = json.dumps(expected, indent=None, separators=(",", ":"))
    (case / "expected.json").write_text(text.replace("],[", "],\n[") + "\n")
    print(f"{case.name}: {len(rows)} requests, {summary['completed_requests']} completed")


if __name__ == "__main__":
    names = set(sys.argv[1:])  # only these cases; all when none is given
    for case in sorted(p for p in HERE.iterdir() if (p / "config.json").exists()):
        if not names or case.name in names:
            regen(case)
