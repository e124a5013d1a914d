#!/usr/bin/env python3
"""Regenerate the disaggregated golden data from the reference peer (not run by CI).

    python tests/golden/disagg/make_golden.py [CASE ...]

For each case: make a trace with ``make_trace.py``, run Dynamo's mocker offline replay in
``mode=disagg`` with ``router_mode=kv_router`` through ``peer_dynamo.py``, and keep the
per-request fields the golden test compares (times, token counts, reused tokens, the
handoff timestamps and the workers) as ``<case>.expected.json``. ``engine`` holds the keys
shared by both roles, ``prefill_engine``/``decode_engine`` the per-role overrides, and
``launch`` the top-level launch keys (``dp_size``).
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

COMMON = ["--block-size", "64", "--prefix-groups", "3", "--prefix-frac", "0.6",
          "--prefix-ratio", "0.5"]
LOAD = ["--isl", "uniform:200:1500", "--osl", "uniform:10:120"]
CASES: dict[str, dict] = {
    # One prefill and one decode worker under load: batching on both sides, activations
    # deferred to decode pass ends, releases deferred to prefill pass ends.
    "vllm_1p1d": {
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072},
        "workers": (1, 1),
    },
    # Two of each: the KV router places prefills by overlap, decodes by load.
    "vllm_2p2d": {
        "trace": ["-n", "60", "--rate", "40", "--seed", "5", *LOAD],
        "engine": {"kv_transfer_bandwidth": 8.0, "kv_bytes_per_token": 131072},
        "workers": (2, 2),
    },
    # A small decode pool: reservations wait in FIFO order until decodes finish.
    "vllm_tight_decode": {
        "trace": ["-n", "30", "--rate", "30", "--seed", "3", *LOAD],
        "engine": {"kv_transfer_bandwidth": 4.0, "kv_bytes_per_token": 131072},
        "decode_engine": {"num_gpu_blocks": 80},
        "workers": (1, 1),
    },
    # Attention DP on both roles: the routers pick DP ranks too.
    "vllm_1p1d_dp2": {
        "trace": ["-n", "50", "--rate", "30", "--seed", "4", *LOAD],
        "engine": {"kv_transfer_bandwidth": 4.0, "kv_bytes_per_token": 131072},
        "launch": {"dp_size": 2},
        "workers": (1, 1),
    },
    # A small prefill pool: held sources keep their KV until the transfer ends, so later
    # prefills wait for releases.
    "vllm_tight_prefill": {
        "trace": ["-n", "30", "--rate", "40", "--seed", "12", *LOAD],
        "engine": {"kv_transfer_bandwidth": 1.0, "kv_bytes_per_token": 131072},
        "prefill_engine": {"num_gpu_blocks": 60},
        "workers": (1, 1),
    },
    "trtllm_tight_prefill": {
        "backend": "trtllm",
        "trace": ["-n", "30", "--rate", "40", "--seed", "12", *LOAD],
        "engine": {"kv_transfer_bandwidth": 1.0, "kv_bytes_per_token": 131072},
        "prefill_engine": {"num_gpu_blocks": 120},
        "workers": (1, 1),
    },
    "sglang_tight_prefill": {
        "backend": "sglang",
        "trace": ["-n", "30", "--rate", "40", "--seed", "12", *LOAD],
        "engine": {"kv_transfer_bandwidth": 1.0, "kv_bytes_per_token": 131072,
                   "block_size": 16},
        "prefill_engine": {"num_gpu_blocks": 240},
        "workers": (1, 1),
    },
    # Only the blocks the decode worker lacks are sent: shared prefixes stay resident there.
    "vllm_destination_missing": {
        "trace": ["-n", "40", "--rate", "15", "--seed", "8", "--isl", "uniform:200:1500",
                  "--osl", "uniform:5:40"],
        "engine": {"kv_transfer_bandwidth": 1.0, "kv_bytes_per_token": 131072,
                   "kv_transfer_timing_mode": "destination_missing"},
        "workers": (1, 1),
    },
    # TRT-LLM (guaranteed no evict) in both roles.
    "trtllm_1p1d": {
        "backend": "trtllm",
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072},
        "workers": (1, 1),
    },
    "trtllm_tight_decode": {
        "backend": "trtllm",
        "trace": ["-n", "30", "--rate", "30", "--seed", "3", *LOAD],
        "engine": {"kv_transfer_bandwidth": 4.0, "kv_bytes_per_token": 131072},
        "decode_engine": {"num_gpu_blocks": 160},
        "workers": (1, 1),
    },
    # SGLang (page size 16; the reference's default page is 1 token).
    "sglang_1p1d": {
        "backend": "sglang",
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072,
                   "block_size": 16},
        "workers": (1, 1),
    },
    "sglang_tight_decode": {
        "backend": "sglang",
        "trace": ["-n", "30", "--rate", "30", "--seed", "3", *LOAD],
        "engine": {"kv_transfer_bandwidth": 4.0, "kv_bytes_per_token": 131072,
                   "block_size": 16},
        "decode_engine": {"num_gpu_blocks": 320},
        "workers": (1, 1),
    },
    # Speculative decoding on both roles, deterministic acceptance (rates 0 and 1): the
    # prefill worker emits one token, the decode worker verifies bursts.
    "vllm_spec_1p1d": {
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072, "aic_nextn": 2,
                   "aic_nextn_accept_rates": "1,1"},
        "workers": (1, 1),
    },
    "vllm_spec_tight_decode": {
        "trace": ["-n", "30", "--rate", "30", "--seed", "3", *LOAD],
        "engine": {"kv_transfer_bandwidth": 4.0, "kv_bytes_per_token": 131072, "aic_nextn": 3,
                   "aic_nextn_accept_rates": "1,1,0"},
        "decode_engine": {"num_gpu_blocks": 80},
        "workers": (1, 1),
    },
    "trtllm_spec_1p1d": {
        "backend": "trtllm",
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072, "aic_nextn": 3,
                   "aic_nextn_accept_rates": "1,1,0"},
        "decode_engine": {"num_gpu_blocks": 160},
        "workers": (1, 1),
    },
    "sglang_spec_1p1d": {
        "backend": "sglang",
        "trace": ["-n", "40", "--rate", "25", "--seed", "7", *LOAD],
        "engine": {"kv_transfer_bandwidth": 2.0, "kv_bytes_per_token": 131072,
                   "block_size": 16, "aic_nextn": 2, "aic_nextn_accept_rates": "1,1"},
        "workers": (1, 1),
    },
    # No transfer model: the handoff is instantaneous.
    "vllm_no_transfer_time": {
        "trace": ["-n", "30", "--rate", "20", "--seed", "9", *LOAD],
        "engine": {},
        "workers": (1, 1),
    },
}
KEPT = ("arrival_time_ms", "first_token_ms", "terminal_time_ms", "output_length",
        "reused_input_tokens", "prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
        "destination_activated_ms", "decode_admit_ms", "source_released_ms",
        "prefill_worker_idx", "decode_worker_idx")


REPEAT = 5


def exact(case: dict) -> bool:
    """One slot per pool: the reference's routing has no ties to break at random."""
    return tuple(case["workers"]) == (1, 1) and case.get("launch", {}).get("dp_size", 1) == 1


def peer_rows(trace: Path, sets: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.jsonl"
        args = [a for s in [*sets, f"report_jsonl_path={report}"] for a in ("--set", s)]
        subprocess.run([sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace), *args],
                       check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: r["arrival_time_ms"])
    return rows


def summary(rows: list[dict]) -> dict[str, float]:
    """Mean TTFT and E2E latency and the duration of one peer run (completed requests)."""
    done = [r for r in rows if r["terminal_status"] == "completed" and r["first_token_ms"]]
    n = max(len(done), 1)
    return {
        "mean_ttft_ms": sum(r["first_token_ms"] - r["arrival_time_ms"] for r in done) / n,
        "mean_e2e_ms": sum(r["terminal_time_ms"] - r["arrival_time_ms"] for r in done) / n,
        "duration_ms": max((r["terminal_time_ms"] for r in done), default=0.0),
    }


def run_case(name: str, case: dict) -> None:
    trace = HERE / f"{name}.trace.jsonl"
    subprocess.run([sys.executable, str(TOOLS / "make_trace.py"), *case["trace"], *COMMON,
                    "-o", str(trace)], check=True)
    prefill, decode = case["workers"]
    sets = ["mode=disagg", "router_mode=kv_router", f"num_prefill_workers={prefill}",
            f"num_decode_workers={decode}", f"trace_block_size={TRACE_BLOCK_SIZE}",
            "engine=" + json.dumps(case["engine"]),
            f"engine_type={case.get('backend', 'vllm')}"]
    sets += [f"{k}={json.dumps(v)}" for k, v in case.get("launch", {}).items()]
    for role in ("prefill_engine", "decode_engine"):
        if role in case:
            sets.append(f"{role}={json.dumps(case[role])}")
    # With several workers the reference breaks routing ties at random, so its per-request
    # results vary from run to run: keep one run's requests and every run's summary.
    runs = 1 if exact(case) else REPEAT
    summaries = []
    for _ in range(runs):
        rows = peer_rows(trace, sets)
        summaries.append(summary(rows))
    out = {
        "peer": "dynamo-mocker 1.6.1 (peer_dynamo.py, mode=disagg, router_mode=kv_router)",
        "trace_block_size": TRACE_BLOCK_SIZE,
        "backend": case.get("backend", "vllm"),
        "workers": list(case["workers"]),
        "engine": case["engine"],
        "prefill_engine": case.get("prefill_engine", {}),
        "decode_engine": case.get("decode_engine", {}),
        "launch": case.get("launch", {}),
        "peer_runs": summaries,
        "requests": [
            {**{k: r.get(k) for k in KEPT}, "rejected": r["terminal_status"] == "rejected"}
            for r in rows
        ],
    }
    (HERE / f"{name}.expected.json").write_text(
        json.dumps(out, indent=None, separators=(",", ":")) + "\n"
    )
    print(name, len(rows), "requests")


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    for name in names:
        run_case(name, CASES[name])


if __name__ == "__main__":
    main()
