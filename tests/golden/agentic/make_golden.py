#!/usr/bin/env python3
"""Regenerate the agentic golden data from the reference peer (not run by CI).

    python tests/golden/agentic/make_golden.py [CASE ...]

Writes the sample traces (seeded, so they come out the same each time), runs Dynamo 1.6.1's
replay on each case through ``benchmarks/peer_dynamo_agentic.py`` with ``report_jsonl_path``
and keeps, per reported request in the reference's node order (``node``: its uuid less 1,
servesim's request id), the fields
tests/replay/test_agentic_golden.py compares, as ``<case>.expected.json``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
PEER = HERE.parents[2] / "benchmarks" / "peer_dynamo_agentic.py"
KEPT = ("arrival_time_ms", "first_token_ms", "terminal_time_ms", "output_length",
        "reused_input_tokens", "terminal_status")

# case: (trace file, format, peer keys, engine keys, servesim --set overrides)
CASES: dict[str, tuple[str, str, dict, dict, list[str]]] = {
    "weka_auto": ("weka_sample.jsonl", "weka", {}, {"block_size": 16, "num_gpu_blocks": 2000}, []),
    "weka_tight_pool": ("weka_sample.jsonl", "weka", {"arrival_speedup_ratio": 2.0},
                        {"block_size": 16, "num_gpu_blocks": 70},
                        ["workload.arrival_speedup_ratio=2"]),
    "weka_relative": ("weka_relative.jsonl", "weka", {}, {"block_size": 16, "num_gpu_blocks": 2000}, []),
    "weka_relative_as_absolute": (
        "weka_sample.jsonl", "weka", {"weka_nested_timestamp_basis": "relative"},
        {"block_size": 16, "num_gpu_blocks": 2000},
        ["workload.trace.options={nested_timestamp_basis: relative}"]),
    "weka_max_sim_time": ("weka_sample.jsonl", "weka", {"max_sim_time_ms": 1500.0},
                          {"block_size": 16, "num_gpu_blocks": 2000},
                          ["workload.stop={max_sim_time_ms: 1500}"]),
    "v2_sample": ("agentic_v2_sample.jsonl", "agentic_mooncake", {},
                  {"block_size": 16, "num_gpu_blocks": 2000}, []),
    "v2_tight_pool": ("agentic_v2_sample.jsonl", "agentic_mooncake", {"arrival_speedup_ratio": 1.5},
                      {"block_size": 16, "num_gpu_blocks": 30},
                      ["workload.arrival_speedup_ratio=1.5"]),
}


# -- sample traces ------------------------------------------------------------------------------

def _req(rng: random.Random, t: float, hashes: list[int], block: int) -> dict:
    return {"t": round(t, 6), "type": rng.choice("ns"), "model": "m",
            "in": len(hashes) * block - rng.randrange(block), "out": rng.randint(8, 120),
            "hash_ids": list(hashes), "api_time": round(rng.uniform(0.05, 0.4), 6)}


def weka_play(rng: random.Random, pid: int, block: int, relative: bool) -> dict:
    """One agent session: a main chain that grows its prompt, blocking and background
    subagents with chains of their own, a compaction (a fork), a title preamble."""
    nxt = [1000]

    def new(n: int) -> list[int]:
        out = list(range(nxt[0], nxt[0] + n))
        nxt[0] += n
        return out

    system = new(3)
    hashes = system + new(2)
    t = 0.0
    reqs: list[dict] = []
    if pid % 2 == 0:  # a title request that shares nothing: the preamble
        reqs.append({"t": 0.0, "type": "n", "model": "m", "in": 40, "out": 12,
                     "hash_ids": new(2), "api_time": 0.05})
        t = 0.01
    for step in range(rng.randint(5, 9)):
        r = _req(rng, t, hashes, block)
        reqs.append(r)
        end = t + r["api_time"]
        kind = rng.random()
        if kind < 0.25 and step > 0:  # a blocking subagent
            inner, it, ih = [], end + 0.01, system + new(2)
            for _ in range(rng.randint(1, 3)):
                q = _req(rng, it, ih, block)
                inner.append(q)
                it += q["api_time"] + rng.uniform(0.0, 0.1)
                ih = ih + new(1)
            marker = end + 0.01
            if relative:
                for q in inner:
                    q["t"] = round(q["t"] - marker, 6)
            reqs.append({"t": round(marker, 6), "type": "subagent", "agent_id": f"a{pid}{step}",
                         "subagent_type": "Explore", "status": "completed",
                         "duration_ms": int((it - marker) * 1000) + 5, "requests": inner,
                         "models": ["m"]})
            t = it + 0.02
        elif kind < 0.4:  # a background subagent
            marker = end + 0.005
            q = _req(rng, marker, system + new(2), block)
            if relative:
                q["t"] = 0.0
            reqs.append({"t": round(marker, 6), "type": "subagent", "agent_id": f"b{pid}{step}",
                         "subagent_type": "Explore", "status": "async_launched", "requests": [q]})
            t = end + rng.uniform(0.02, 0.3)
        elif kind < 0.5 and step > 2:  # a compaction: the prompt restarts from the system
            hashes = system + new(2)
            t = end + rng.uniform(0.02, 0.3)
            continue
        else:
            t = end + rng.uniform(0.02, 0.3)
        hashes = hashes + new(rng.randint(1, 3))
    return {"id": f"play{pid}", "models": ["m"], "block_size": block, "hash_id_scope": "local",
            "requests": reqs}


def agentic_v2(rng: random.Random, n: int, block: int) -> list[dict]:
    """A header and ``n`` rows in three plays, with dispatch and completion edges."""
    rows = [{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": block,
             "hash_id_scope": "local", "source": {"format": "sample", "digest": "seed-5"}}]
    for i in range(n):
        play = i % 3
        deps = []
        earlier = [j for j in range(i) if j % 3 == play]
        if earlier:
            for j in rng.sample(earlier, min(len(earlier), rng.randint(1, 2))):
                trig = rng.choice(["completion", "completion", "dispatch"])
                rel = "spawn" if trig == "dispatch" else rng.choice(["sequence", "spawn", "join"])
                deps.append({"request_id": f"r{j}", "trigger": trig,
                             "delay_ms": round(rng.uniform(0, 40), 3), "relation": rel})
        depth = rng.randint(2, 10)
        rows.append({"request_id": f"r{i}", "play_id": f"p{play}", "session_id": f"s{play}",
                     "model": "m", "input_length": depth * block - rng.randrange(block),
                     "output_length": rng.randint(4, 60),
                     "hash_ids": [play * 100 + k for k in range(depth)],
                     "not_before_ms": 0.0 if deps else round(rng.uniform(0, 50), 3),
                     "dependencies": deps, "priority": 0})
    return rows


def write_samples() -> None:
    rng = random.Random(44)
    (HERE / "weka_sample.jsonl").write_text(
        "".join(json.dumps(weka_play(rng, p, 32, False)) + "\n" for p in range(6)))
    (HERE / "weka_relative.jsonl").write_text(
        "".join(json.dumps(weka_play(rng, p, 32, True)) + "\n" for p in range(4)))
    (HERE / "agentic_v2_sample.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in agentic_v2(random.Random(5), 30, 32)))


# -- reference runs -----------------------------------------------------------------------------

def main() -> None:
    write_samples()
    names = sys.argv[1:] or list(CASES)
    for name in names:
        trace, fmt, peer_keys, engine, _ = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.jsonl"
            sets = {"trace_format": fmt, "execution_model": "m", "report_jsonl_path": str(report),
                    **peer_keys, "engine": engine}
            args = [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
            subprocess.run([sys.executable, str(PEER), str(HERE / trace), *args], check=True,
                           stdout=subprocess.DEVNULL)
            rows = [json.loads(x) for x in report.read_text().splitlines() if x.strip()]
        rows.sort(key=lambda r: r["uuid"])
        out = {"peer": "dynamo-mocker 1.6.1 (benchmarks/peer_dynamo_agentic.py)",
               "trace": trace, "format": fmt, "peer_keys": peer_keys, "engine": engine,
               "servesim_sets": CASES[name][4],
               "requests": [{"node": int(r["uuid"].replace("-", ""), 16) - 1,
                             **{k: r[k] for k in KEPT},
                             "first_admission_reused_tokens": (
                                 r["admission_history"][0]["reused_input_tokens"]
                                 if r["admission_history"] else None),
                             "admissions": len(r["admission_history"])} for r in rows]}
        (HERE / f"{name}.expected.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
        print(name, len(rows), "requests,", sum(max(0, r["admissions"] - 1) for r in out["requests"]),
              "readmissions,", sum(r["terminal_status"] != "completed" for r in out["requests"]),
              "not completed")


if __name__ == "__main__":
    main()
