"""Dynamo's planner in the loop: the reference's planner replay against servesim's.

    PY=/path/to/venv/bin/python   # ai-dynamo 1.6.1 with its planner's imports, and servesim
    PYTHONPATH=/work/shared/tools/aic_shim $PY benchmarks/conformance/dynamo_planner_compare.py \
        [--seed 7] [--startup 7] [--record tests/golden/dynamo_planner]

One seeded Mooncake trace (4 requests/s for 40 s, 16 requests/s for 40 s, 4 requests/s for
40 s; prompts of 256-1536 tokens, 64-256 output tokens, 64-token blocks) runs through

* the reference: ``dynamo.replay.run_trace_replay(..., planner_config=...)`` (ai-dynamo
  1.6.1's mocker and planner; benchmarks/conformance/dynamo_planner_peer.py records each
  planner tick), one vLLM worker to begin with, workers starting in ``--startup`` s;
* servesim: the same engine (vLLM, polynomial timing, 1024 blocks of 64 tokens, 64
  sequences, 4096 batched tokens), a round-robin cluster of one worker, ``lifecycle.startup_s``
  the same, and ``planner: {type: dynamo}`` with the same planner configuration (Dynamo's
  load-based scaling of an aggregated pool, ticking every 5 s) and the capabilities the
  reference derives from its engine arguments.

It prints both sides' scaling events (time, from, to), how many ticks decided alike, the
planner's view (per tick, the summed queued-prefill and scheduled-decode KV tokens of the
FPMs each side fed), and the TTFT/TPOT/E2E means and worker-seconds with their differences.
``--record DIR`` writes what the test suite replays without Dynamo: the trace, and
``decisions.json`` (servesim's planner payloads and Dynamo's answers, servesim's scaling
timeline and latency means, and the reference's scaling events and means).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLANNER_CONFIG = {
    "mode": "agg", "backend": "mocker", "environment": "virtual",
    "optimization_target": "throughput", "enable_throughput_scaling": False,
    "enable_load_scaling": True, "load_adjustment_interval_seconds": 5, "min_endpoint": 1,
    "max_gpu_budget": 8,
}
ENGINE = {"block_size": 64, "num_gpu_blocks": 1024, "max_num_seqs": 64,
          "max_num_batched_tokens": 4096}
#: What the reference's replay derives for the planner (dynamo/replay/planner.py, _engine_caps).
CAPABILITIES = {"num_gpu": 1, "max_num_batched_tokens": 4096, "max_num_seqs": 64,
                "max_kv_tokens": 1024 * 64}
PHASES = ((4.0, 40.0), (16.0, 40.0), (4.0, 40.0))


def write_trace(path: Path, seed: int) -> int:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    t = 0.0
    for rate, span in PHASES:
        end = t + span
        while True:
            t += rng.expovariate(rate)
            if t >= end:
                t = end
                break
            isl, osl = rng.randint(256, 1536), rng.randint(64, 256)
            rows.append({"timestamp": int(t * 1000), "input_length": isl, "output_length": osl,
                         "hash_ids": [len(rows) * 100 + i for i in range(-(-isl // 64))]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def servesim_config(trace: str, startup: float, recorded: str | None = None) -> dict[str, Any]:
    planner: dict[str, Any] = {"type": "dynamo", "interval_s": 5,
                               "planner_config": PLANNER_CONFIG, "capabilities": CAPABILITIES}
    if recorded is not None:
        planner["recorded"] = recorded
    return {
        "engine": {"backend": "vllm", **ENGINE},
        "cluster": {"workers": 1, "router": "round_robin"},
        "workload": {"trace": {"path": trace, "trace_block_size": 64}},
        "lifecycle": {"startup_s": startup, "drain": "wait"},
        "planner": planner,
    }


def reference(trace: Path, startup: float, tmp: Path) -> dict[str, Any]:
    peer = {"engine_type": "vllm", "num_workers": 1, "trace_block_size": 64,
            "startup_time": startup, "engine": ENGINE}
    (tmp / "peer.json").write_text(json.dumps(peer))
    (tmp / "planner.json").write_text(json.dumps(PLANNER_CONFIG))
    out = tmp / "peer_out.json"
    subprocess.run([sys.executable, str(HERE / "dynamo_planner_peer.py"), str(trace),
                    "--config", str(tmp / "peer.json"), "--planner", str(tmp / "planner.json"),
                    "-o", str(out)], check=True, cwd=tmp, capture_output=True)
    return json.loads(out.read_text())


def ours(trace: Path, startup: float, tmp: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    path = tmp / "sim.yaml"
    cfg = servesim_config(str(trace), startup)
    cfg["planner"]["record_to"] = str(tmp / "ours_ticks.json")
    path.write_text(json.dumps(cfg))
    report = simulate(load_config(str(path))).report
    return report, json.loads((tmp / "ours_ticks.json").read_text())["ticks"]


def view(tick: dict[str, Any]) -> tuple[int, int]:
    fpms = tick["input"]["decode_fpm_snapshots"]
    return (sum(f["sum_queued_prefill_tokens"] for f in fpms),
            sum(f["sum_decode_kv_tokens"] for f in fpms))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--startup", type=float, default=7.0)
    ap.add_argument("--record", type=Path, help="write the trace and decisions.json here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        trace = tmp / "trace.jsonl"
        n = write_trace(trace, a.seed)
        ref = reference(trace, a.startup, tmp)
        rep, ticks = ours(trace, a.startup, tmp)
        if a.record is not None:
            a.record.mkdir(parents=True, exist_ok=True)
            (a.record / "trace.jsonl").write_text(trace.read_text())
    ev_ref = [(e["at_s"], e["from_count"], e["to_count"]) for e in ref["scaling_events"] or []]
    ev_ours = [(e["at_s"], e["from_count"], e["to_count"])
               for e in rep["elastic"]["planner"]["scaling_events"]]
    print(f"trace: {n} requests (seed {a.seed}); workers start in {a.startup:g} s")
    print(f"scaling events: reference {len(ev_ref)}, servesim {len(ev_ours)}, "
          f"{'identical' if ev_ref == ev_ours else 'DIFFERENT'}")
    print(f"{'t (s)':>7} {'reference':>10} {'servesim':>10}")
    for k in range(max(len(ev_ref), len(ev_ours))):
        r = ev_ref[k] if k < len(ev_ref) else None
        o = ev_ours[k] if k < len(ev_ours) else None
        t = (r or o)[0]  # type: ignore[index]
        fmt = lambda e: f"{e[1]}->{e[2]}" if e else "-"  # noqa: E731
        print(f"{t:7.1f} {fmt(r):>10} {fmt(o):>10}")
    same = sum(1 for x, y in zip(ref["ticks"], ticks, strict=False)
               if x["decision"] == y["decision"])
    print(f"ticks: reference {len(ref['ticks'])}, servesim {len(ticks)}, same decision {same}")
    print(f"{'t (s)':>7} {'queued prefill tok ref/ours':>28} {'decode KV tok ref/ours':>24}")
    for x, y in zip(ref["ticks"], ticks, strict=False):
        (qr, kr), (qo, ko) = view(x), view(y)
        print(f"{x['input']['now_ms'] / 1000:7.1f} {qr:>13}/{qo:<14} {kr:>11}/{ko:<12}")
    s = ref["summary"]
    rows = [("TTFT mean (ms)", s["ttft_ms"]["mean"], rep["mean_ttft_ms"]),
            ("TPOT mean (ms)", s["tpot_ms"]["mean"], rep["mean_tpot_ms"]),
            ("E2E mean (ms)", s["e2e_ms"]["mean"], rep["mean_e2el_ms"]),
            ("worker-seconds", s["worker_seconds"]["decode"], rep["elastic"]["gpu_seconds"])]
    print(f"{'':<16} {'reference':>11} {'servesim':>11} {'diff':>8}")
    for name, r, o in rows:
        print(f"{name:<16} {r:11.3f} {o:11.3f} {100.0 * (o - r) / r:+7.2f}%")
    if a.record is not None:
        record = {
            "trace_seed": a.seed, "startup_s": a.startup,
            "planner_config": PLANNER_CONFIG, "capabilities": CAPABILITIES, "engine": ENGINE,
            "initial_tick_ms": ticks[0]["input"]["now_ms"] if ticks else None,
            "ticks": ticks,
            "servesim": {"scaling": rep["elastic"]["scaling"],
                         "scaling_events": rep["elastic"]["planner"]["scaling_events"],
                         "means": {k: rep[k] for k in ("mean_ttft_ms", "mean_tpot_ms",
                                                       "mean_e2el_ms")},
                         "gpu_seconds": rep["elastic"]["gpu_seconds"]},
            "reference": {"scaling_events": ref["scaling_events"],
                          "means": {"ttft_ms": s["ttft_ms"]["mean"],
                                    "tpot_ms": s["tpot_ms"]["mean"],
                                    "e2e_ms": s["e2e_ms"]["mean"]},
                          "worker_seconds": s["worker_seconds"]["decode"],
                          "ticks": ref["ticks"]},
        }
        (a.record / "decisions.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("DYN_LOG", "error")
    main()
