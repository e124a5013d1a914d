"""Regenerate the SGLang golden expectations from the reference implementation.

Not a test: it needs the peer (``/work/shared/tools/peer_dynamo.py``, Dynamo 1.6.1's mocker
replay with ``engine_type=sglang``). CI only reads the checked-in ``*.json`` files.

    python tests/golden/sglang/regenerate.py [PEER_SCRIPT] [CASE ...]

Each case is ``<name>.trace.jsonl`` (Mooncake JSONL, 64 tokens per hash id, distinct
timestamps because the peer's report identifies requests by arrival time) plus
``<name>.json``: ``{"peer": ..., "config": {...}, "columns": [...], "expected": [[...], ...]}``
with one row per request in trace order. ``reused_input_tokens`` is the peer report's value;
for a retracted request, admitted again, it is the largest reuse over its admissions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
PEER = "/work/shared/tools/peer_dynamo.py"
COLUMNS = ["arrival_ms", "first_token_ms", "terminal_time_ms", "output_length", "reused_input_tokens"]

CASES: dict[str, dict] = {
    # 40 requests, three shared-prefix groups, default SGLang engine (page 1, 16384 tokens).
    "prefix_fcfs": {},
    # A 4000-token pool: decode memory pressure retracts requests (3 readmissions).
    "retraction": {"num_gpu_blocks": 4000},
    # Page size 16, a 9600-token pool and 512-token chunks: chunk packing, page rounding,
    # retraction with pages.
    "page16_chunked": {"block_size": 16, "num_gpu_blocks": 600, "sglang": {"chunked_prefill_size": 512}},
    # Attention DP 2 (requests alternate between ranks, as the reference's round robin does):
    # per-rank chunk and conservativeness normalisation, shared pass boundaries, retraction.
    "dp2_retraction": {"dp_size": 2, "num_gpu_blocks": 3000},
    # A queue builds (max 16 running, 2048 prefill tokens per pass) and LPM reorders it.
    "lpm_queue": {"max_num_seqs": 16, "sglang": {"schedule_policy": "lpm", "max_prefill_tokens": 2048}},
    # Speculative decoding with deterministic acceptance (rates 0 and 1): bursts, their
    # memory check and retraction under pressure.
    "spec_accept_all": {"aic_nextn": 2, "aic_nextn_accept_rates": "1,1"},
    "spec_retraction": {"num_gpu_blocks": 4000, "aic_nextn": 3, "aic_nextn_accept_rates": "1,1,0"},
}


def run_peer(peer: str, trace: Path, config: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        args = [
            sys.executable,
            peer,
            str(trace),
            "--set",
            "engine_type=sglang",
            "--set",
            "trace_block_size=64",
        ]
        args += ["--set", f"report_jsonl_path={report}"]
        for key, value in config.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
        summary = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    by_arrival = {row["arrival_time_ms"]: row for row in rows}
    if len(by_arrival) != len(rows):
        raise SystemExit(f"{trace}: arrival times are not distinct")
    return [by_arrival[k] for k in sorted(by_arrival)] + [summary]


def _dump(doc: dict) -> str:
    """JSON with one expected row per line (small, reviewable diffs)."""
    head = {k: v for k, v in doc.items() if k != "expected"}
    lines = json.dumps(head, indent=1)[:-2]
    rows = ",\n  ".join(json.dumps(row) for row in doc["expected"])
    return f'{lines},\n "expected": [\n  {rows}\n ]\n}}\n'


def main() -> None:
    args = sys.argv[1:]
    names = [a for a in args if a in CASES] or list(CASES)  # case names select cases
    peer = next((a for a in args if a not in CASES), PEER)
    for name in names:
        config = CASES[name]
        trace = HERE / f"{name}.trace.jsonl"
        *rows, summary = run_peer(peer, trace, config)
        expected = [
            [
                r["arrival_time_ms"],
                r["first_token_ms"],
                r["terminal_time_ms"],
                r["output_length"],
                r["reused_input_tokens"],
            ]
            for r in rows
        ]
        doc = {
            "peer": f"{summary['peer']} {summary['version']} engine_type=sglang trace_block_size=64",
            "config": config,
            "columns": COLUMNS,
            "readmissions": sum(r["readmission_count"] for r in rows),
            "expected": expected,
        }
        (HERE / f"{name}.json").write_text(_dump(doc))
        print(name, len(expected), "requests,", doc["readmissions"], "readmissions")


if __name__ == "__main__":
    main()
