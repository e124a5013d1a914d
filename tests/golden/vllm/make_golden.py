#!/usr/bin/env python3
"""Regenerate the vllm golden data from the reference peer (not run by CI).

    python tests/golden/vllm/make_golden.py [CASE ...]

For each case: make a trace with ``make_trace.py``, run Dynamo's mocker through
``peer_dynamo.py`` with ``report_jsonl_path`` and ``trace_block_size``, and keep the
per-request fields the golden test compares, as ``<case>.expected.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
TOOLS = Path("/work/shared/tools")
TRACE_BLOCK_SIZE = 64

COMMON = ["--isl", "uniform:200:1500", "--osl", "uniform:20:200", "--block-size", "64",
          "--prefix-groups", "3", "--prefix-frac", "0.6", "--prefix-ratio", "0.5"]
CASES = {
    "prefix": (["-n", "40", "--rate", "20", "--seed", "7"], {"num_gpu_blocks": 1000}),
    "preempt_lifo": (["-n", "40", "--rate", "20", "--seed", "7"], {"num_gpu_blocks": 60}),
    "preempt_fifo": (["-n", "30", "--rate", "20", "--seed", "11"],
                     {"num_gpu_blocks": 50, "preemption_mode": "fifo"}),
    "no_chunking": (["-n", "40", "--rate", "20", "--seed", "3"],
                    {"num_gpu_blocks": 400, "enable_chunked_prefill": False,
                     "max_num_batched_tokens": 2048}),
    "seq_and_budget_limits": (["-n", "50", "--rate", "30", "--seed", "6"],
                              {"num_gpu_blocks": 400, "max_num_seqs": 4,
                               "max_num_batched_tokens": 512}),
    # Prompts at or over max_model_len are rejected; the others stop at the model length.
    "max_model_len": (["-n", "40", "--rate", "20", "--seed", "7"],
                      {"num_gpu_blocks": 300, "max_model_len": 1200}),
    # Attention DP: two ranks share pass boundaries; the peer assigns ranks round-robin
    # and the golden data keeps each request's rank.
    "dp2_preempt": (["-n", "40", "--rate", "20", "--seed", "7"],
                    {"num_gpu_blocks": 200, "dp_size": 2}),
    "no_prefix_cache_preempt": (["-n", "40", "--rate", "20", "--seed", "7"],
                                {"num_gpu_blocks": 40, "enable_prefix_caching": False}),
    "speedup_ratios": (["-n", "40", "--rate", "40", "--seed", "9"],
                       {"num_gpu_blocks": 1000, "speedup_ratio": 2.0, "decode_speedup_ratio": 1.5}),
    # Speculative decoding (aic_nextn) with acceptance rates of 0 and 1, where the
    # reference's sampler is deterministic: bursts, reservations, the dangling token and the
    # extra recomputed prefix block agree request for request.
    "spec_accept_all": (["-n", "40", "--rate", "20", "--seed", "7"],
                        {"num_gpu_blocks": 1000, "aic_nextn": 2, "aic_nextn_accept_rates": "1,1"}),
    "spec_reject_all": (["-n", "40", "--rate", "20", "--seed", "7"],
                        {"num_gpu_blocks": 1000, "aic_nextn": 1, "aic_nextn_accept_rates": "0"}),
    "spec_two_of_three": (["-n", "40", "--rate", "20", "--seed", "9"],
                          {"num_gpu_blocks": 1000, "aic_nextn": 3, "aic_nextn_accept_rates": "1,1,0"}),
    "spec_preempt_lifo": (["-n", "40", "--rate", "20", "--seed", "7"],
                          {"num_gpu_blocks": 60, "aic_nextn": 3, "aic_nextn_accept_rates": "1,1,1"}),
    "spec_preempt_fifo": (["-n", "30", "--rate", "20", "--seed", "11"],
                          {"num_gpu_blocks": 50, "preemption_mode": "fifo", "aic_nextn": 2,
                           "aic_nextn_accept_rates": "1,1"}),
    "spec_dp2": (["-n", "40", "--rate", "20", "--seed", "7"],
                 {"num_gpu_blocks": 200, "dp_size": 2, "aic_nextn": 2, "aic_nextn_accept_rates": "1,1"}),
    "spec_max_model_len": (["-n", "40", "--rate", "20", "--seed", "7"],
                           {"num_gpu_blocks": 300, "max_model_len": 1200, "aic_nextn": 5,
                            "aic_nextn_accept_rates": "1,1,1,1,1"}),
}
LAUNCH_KEYS = ("dp_size",)  # top-level keys for the peer, EngineConfig fields for servesim
KEPT = ("arrival_time_ms", "first_token_ms", "terminal_time_ms", "output_length",
        "reused_input_tokens")


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    for name, (trace_args, engine) in CASES.items():
        if name not in names:
            continue
        trace = HERE / f"{name}.trace.jsonl"
        subprocess.run([sys.executable, str(TOOLS / "make_trace.py"), *trace_args, *COMMON,
                        "-o", str(trace)], check=True)
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.jsonl"
            subprocess.run(
                [sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace),
                 "--set", f"trace_block_size={TRACE_BLOCK_SIZE}",
                 "--set", f"report_jsonl_path={report}",
                 *[a for k in LAUNCH_KEYS if k in engine for a in ("--set", f"{k}={engine[k]}")],
                 "--set", "engine=" + json.dumps({k: v for k, v in engine.items()
                                                  if k not in LAUNCH_KEYS})],
                check=True, stdout=subprocess.DEVNULL)
            rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
        rows.sort(key=lambda r: r["arrival_time_ms"])
        out = {
            "peer": "dynamo-mocker 1.6.1 (peer_dynamo.py)",
            "trace_block_size": TRACE_BLOCK_SIZE,
            "engine": engine,
            "requests": [
                {**{k: r[k] for k in KEPT},
                 "rejected": r["terminal_status"] == "rejected",
                 "first_admission_reused_tokens": (
                     r["admission_history"][0]["reused_input_tokens"]
                     if r["admission_history"] else None),
                 "admissions": len(r["admission_history"]),
                 **({"admission_reused": [a["reused_input_tokens"] for a in r["admission_history"]]}
                    if "aic_nextn" in engine else {}),
                 "dp_rank": r["routing_history"][0]["dp_rank"] if r["routing_history"] else 0}
                for r in rows
            ],
        }
        (HERE / f"{name}.expected.json").write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
        print(name, len(rows), "requests,", sum(max(0, r["admissions"] - 1) for r in out["requests"]), "readmissions,",
              sum(r["rejected"] for r in out["requests"]), "rejected")


if __name__ == "__main__":
    main()
