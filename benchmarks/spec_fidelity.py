"""Speculative decoding (``aic_nextn``) against the reference, statistically.

    python benchmarks/spec_fidelity.py [--requests 1500] [--seeds 1:6] [--backend vllm]

The reference draws acceptance from Rust's ``StdRng`` and servesim from Python's
``random``, so only the distributions can agree. For each trace seed, a Mooncake trace of
``--requests`` requests (/work/shared/tools/make_trace.py) runs through the reference
(peer_dynamo.py) and through servesim with each acceptance seed (``aic_mtp_seed``); the
table prints both sides' mean over the acceptance seeds of the mean and p99 of TTFT, TPOT
and E2E, the difference between them, and the reference's own spread (max - min over its
acceptance seeds). Needs the reference; never run by the tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from servesim.config.loader import load_config
from servesim.replay.runner import simulate

TOOLS = Path("/work/shared/tools")
KEYS = (("ttft", "ttft_ms", "ttft"), ("tpot", "tpot_ms", "tpot"), ("e2e", "e2e_ms", "e2el"))


def make_trace(path: Path, n: int, seed: int, rate: float) -> None:
    subprocess.run([sys.executable, str(TOOLS / "make_trace.py"), "-n", str(n), "--rate", str(rate),
                    "--isl", "uniform:200:3000", "--osl", "uniform:20:400", "--block-size", "64",
                    "--prefix-groups", "8", "--prefix-frac", "0.6", "--prefix-ratio", "0.5",
                    "--seed", str(seed), "-o", str(path)], check=True, capture_output=True)


def reference(trace: Path, engine: dict[str, Any], backend: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(TOOLS / "peer_dynamo.py"), str(trace),
                          "--set", "trace_block_size=64", "--set", f"engine_type={backend}",
                          "--set", "engine=" + json.dumps(engine)],
                         check=True, capture_output=True, text=True).stdout
    rep = json.loads(out)
    return {f"{s}_{name}": rep[key][s if s == "mean" else "p99"]
            for name, key, _ in KEYS for s in ("mean", "p99")}


def ours(trace: Path, engine: dict[str, Any], backend: str, tmp: Path) -> dict[str, float]:
    cfg = {"engine": {"backend": backend, **engine},
           "workload": {"trace": {"path": str(trace), "trace_block_size": 64}}}
    path = tmp / "sim.yaml"
    path.write_text(json.dumps(cfg))
    rep = simulate(load_config(str(path))).report
    return {f"{s}_{name}": rep[f"{s}_{ours_key}_ms"]
            for name, _, ours_key in KEYS for s in ("mean", "p99")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--traces", default="1:3", help="trace seeds LO:HI")
    ap.add_argument("--seeds", default="1:6", help="acceptance seeds (aic_mtp_seed) LO:HI")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--nextn", type=int, default=3)
    ap.add_argument("--rates", default="0.85,0.6,0.3")
    ap.add_argument("--blocks", type=int, default=4000)
    ap.add_argument("--rate", type=float, default=8.0, help="arrivals per second")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.traces.split(":"))
    slo, shi = (int(x) for x in a.seeds.split(":"))
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for tseed in range(lo, hi):
            trace = tmp / f"trace{tseed}.jsonl"
            make_trace(trace, a.requests, tseed, a.rate)
            ref, sim = [], []
            for seed in range(slo, shi):
                engine = {"num_gpu_blocks": a.blocks, "aic_nextn": a.nextn,
                          "aic_nextn_accept_rates": a.rates, "aic_mtp_seed": seed}
                ref.append(reference(trace, engine, a.backend))
                sim.append(ours(trace, engine, a.backend, tmp))
            print(f"trace seed {tseed}: {a.requests} requests, {a.backend}, nextn {a.nextn}, "
                  f"rates {a.rates}, {shi - slo} acceptance seeds")
            print(f"  {'metric':<10}{'reference':>12}{'servesim':>12}{'diff %':>9}{'ref spread %':>14}")
            for key in ref[0]:
                r = [x[key] for x in ref]
                s = [x[key] for x in sim]
                rm, sm = sum(r) / len(r), sum(s) / len(s)
                print(f"  {key:<10}{rm:>12.3f}{sm:>12.3f}{100 * (sm - rm) / rm:>9.2f}"
                      f"{100 * (max(r) - min(r)) / rm:>14.2f}")


if __name__ == "__main__":
    main()
