"""Host KV offload (G2) against the reference, request by request.

    python benchmarks/host_offload_fidelity.py [--seeds 3,11,5]

For each trace seed, a prefix-heavy Mooncake trace (/work/shared/tools/make_trace.py) whose
prefixes do not fit the G1 pool replays through the reference (peer_dynamo.py, which names
the bytes per token ``kv_cache_bytes_per_token``) and through servesim, with and without
``native_host_offload``; the table prints mean and p99 TTFT and E2E of both and how many
requests agree exactly (first token and completion within 2 us). Needs the reference; never
run by the tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

TOOLS = Path("/work/shared/tools")
SERVESIM = Path(sys.executable).with_name("servesim")
TRACES = {3: ("1500", "4", "60", "0.9", "0.8"), 11: ("2000", "5", "80", "0.9", "0.8"),
          5: ("2000", "6", "120", "0.95", "0.85")}
BASE = {"num_gpu_blocks": 4000, "block_size": 64, "kv_bytes_per_token": 131072}
HOST = {"num_host_blocks": 20000, "d2h_bandwidth_gbps": 16, "h2d_bandwidth_gbps": 16}


def make_trace(path: Path, seed: int) -> None:
    n, rate, groups, frac, ratio = TRACES[seed]
    subprocess.run([sys.executable, str(TOOLS / "make_trace.py"), "-n", n, "--rate", rate,
                    "--isl", "uniform:2000:8000", "--osl", "uniform:50:300", "--block-size", "64",
                    "--prefix-groups", groups, "--prefix-frac", frac, "--prefix-ratio", ratio,
                    "--seed", str(seed), "-o", str(path)], check=True, capture_output=True)


def reference(trace: Path, engine: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    peer = dict(engine)
    peer["kv_cache_bytes_per_token"] = peer.pop("kv_bytes_per_token")
    report = tmp / "peer.jsonl"
    subprocess.run([sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace),
                    "--set", "trace_block_size=64", "--set", f"report_jsonl_path={report}",
                    "--set", "engine=" + json.dumps(peer)], check=True, capture_output=True)
    rows = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["arrival_time_ms"])


def ours(trace: Path, engine: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    cfg = tmp / "sim.yaml"
    cfg.write_text(json.dumps({"engine": engine, "workload": {
        "trace": {"path": str(trace), "trace_block_size": 64}}}))
    per = tmp / "ours.jsonl"
    subprocess.run([str(SERVESIM), "run", str(cfg), "--quiet", "--per-request", str(per)],
                   check=True)
    rows = [json.loads(line) for line in per.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: (r["arrival_ms"], r["request_id"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="3,11,5")
    a = ap.parse_args()
    print(f"{'trace':<8}{'host':<6}{'ref TTFT mean/p99':>22}{'servesim':>22}"
          f"{'ref E2E mean/p99':>24}{'servesim':>24}{'exact':>8}")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for seed in (int(s) for s in a.seeds.split(",")):
            trace = tmp / f"trace{seed}.jsonl"
            make_trace(trace, seed)
            for host in (False, True):
                engine = {**BASE, **({"native_host_offload": HOST} if host else {})}
                ref, sim = reference(trace, engine, tmp), ours(trace, engine, tmp)
                rt = np.array([r["ttft_ms"] for r in ref])
                st = np.array([r["ttft_ms"] for r in sim])
                re = np.array([r["e2e_latency_ms"] for r in ref])
                se = np.array([r["e2el_ms"] for r in sim])
                exact = int(np.sum((np.abs(rt - st) < 2e-3) & (np.abs(re - se) < 2e-3)))
                print(f"{seed:<8}{'on' if host else 'off':<6}"
                      f"{rt.mean():>11.1f}/{np.percentile(rt, 99):<10.1f}"
                      f"{st.mean():>11.1f}/{np.percentile(st, 99):<10.1f}"
                      f"{re.mean():>12.1f}/{np.percentile(re, 99):<11.1f}"
                      f"{se.mean():>12.1f}/{np.percentile(se, 99):<11.1f}{exact:>5}/{len(ref)}")


if __name__ == "__main__":
    main()
