#!/usr/bin/env python3
"""Regenerate the host-offload (G2) golden data from the reference peer (not run by CI).

    python tests/golden/host_offload/make_golden.py [CASE ...]

Each case replays one prefix-heavy Mooncake trace (``make_trace.py``) through Dynamo's
mocker with ``native_host_offload`` (``peer_dynamo.py``; the peer names the bytes per token
``kv_cache_bytes_per_token``, servesim ``kv_bytes_per_token``) and keeps every request's
times, token count, reused tokens and admissions as ``<case>.expected.json``. The
``no_host`` case is the same G1 pool without the host tier.
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
TRACE = ["-n", "300", "--rate", "4", "--isl", "uniform:1000:4000", "--osl", "uniform:20:150",
         "--block-size", "64", "--prefix-groups", "20", "--prefix-frac", "0.9",
         "--prefix-ratio", "0.8", "--seed", "21"]
BASE = {"num_gpu_blocks": 1000, "block_size": 64, "kv_bytes_per_token": 131072}
CASES = {
    "no_host": BASE,
    # Prefixes evicted from G1 come back from the host tier.
    "host_restores_prefixes": {**BASE, "native_host_offload": {
        "num_host_blocks": 5000, "d2h_bandwidth_gbps": 16, "h2d_bandwidth_gbps": 16}},
    # A small host tier: LRU evictions there, slower links.
    "host_lru_evicts": {**BASE, "native_host_offload": {
        "num_host_blocks": 1500, "d2h_bandwidth_gbps": 8, "h2d_bandwidth_gbps": 4}},
    # Bandwidth 0: transfers complete at the boundary that submits them.
    "host_instant": {**BASE, "native_host_offload": {
        "num_host_blocks": 5000, "d2h_bandwidth_gbps": 0, "h2d_bandwidth_gbps": 0}},
    # A tight G1 pool: preemption while loads are in flight.
    "host_tight_g1": {**BASE, "num_gpu_blocks": 300, "native_host_offload": {
        "num_host_blocks": 5000, "d2h_bandwidth_gbps": 16, "h2d_bandwidth_gbps": 16}},
}
KEPT = ("arrival_time_ms", "first_token_ms", "terminal_time_ms", "output_length",
        "reused_input_tokens")


def peer_engine(engine: dict) -> dict:
    out = dict(engine)
    out["kv_cache_bytes_per_token"] = out.pop("kv_bytes_per_token")
    return out


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    trace = HERE / "prefix_heavy.trace.jsonl"
    subprocess.run([sys.executable, str(TOOLS / "make_trace.py"), *TRACE, "-o", str(trace)],
                   check=True)
    for name in names:
        engine = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.jsonl"
            subprocess.run(
                [sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace),
                 "--set", f"trace_block_size={TRACE_BLOCK_SIZE}",
                 "--set", f"report_jsonl_path={report}",
                 "--set", "engine=" + json.dumps(peer_engine(engine))],
                check=True, stdout=subprocess.DEVNULL)
            rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
        rows.sort(key=lambda r: r["arrival_time_ms"])
        out = {
            "peer": "dynamo-mocker 1.6.1 (peer_dynamo.py)",
            "trace": trace.name,
            "trace_block_size": TRACE_BLOCK_SIZE,
            "engine": engine,
            "requests": [
                {**{k: r[k] for k in KEPT},
                 "admission_reused": [a["reused_input_tokens"] for a in r["admission_history"]]}
                for r in rows
            ],
        }
        (HERE / f"{name}.expected.json").write_text(
            json.dumps(out, indent=None, separators=(",", ":")) + "\n")
        print(name, len(rows), "requests")


if __name__ == "__main__":
    main()
