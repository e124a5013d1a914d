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


CASES.update({
    "dynamo_request_agentic": ("dynamo_request_sample.jsonl", "dynamo_request_trace", {},
                               {"block_size": 16, "num_gpu_blocks": 2000}, []),
    "dynamo_request_tight_pool": ("dynamo_request_sample.jsonl", "dynamo_request_trace", {},
                                  {"block_size": 16, "num_gpu_blocks": 20}, []),
    "dynamo_request_standard": ("dynamo_request_standard.jsonl", "dynamo_request_trace", {},
                                {"block_size": 16, "num_gpu_blocks": 2000}, []),
})
CASES.update({
    "weka_lanes": ("weka_sample.jsonl", "weka", {"agentic_lanes": 2},
                   {"block_size": 16, "num_gpu_blocks": 2000}, ["workload.lanes=2"]),
    "v2_lanes": ("agentic_v2_sample.jsonl", "agentic_mooncake", {"agentic_lanes": 2},
                 {"block_size": 16, "num_gpu_blocks": 2000}, ["workload.lanes=2"]),
    "dynamo_request_lanes": ("dynamo_request_sample.jsonl", "dynamo_request_trace",
                             {"agentic_lanes": 3}, {"block_size": 16, "num_gpu_blocks": 2000},
                             ["workload.lanes=3"]),
})
for _be in ("sglang", "trtllm"):
    CASES[f"weka_{_be}"] = ("weka_sample.jsonl", "weka", {"engine_type": _be},
                            {"block_size": 16, "num_gpu_blocks": 2000}, [f"engine.backend={_be}"])
    CASES[f"weka_{_be}_tight_pool"] = ("weka_sample.jsonl", "weka", {"engine_type": _be},
                                       {"block_size": 16, "num_gpu_blocks": 70},
                                       [f"engine.backend={_be}"])
    CASES[f"dynamo_request_{_be}_tight_pool"] = (
        "dynamo_request_sample.jsonl", "dynamo_request_trace", {"engine_type": _be},
        {"block_size": 16, "num_gpu_blocks": 20}, [f"engine.backend={_be}"])
PEER_FORMAT = {"dynamo_request_trace": "dynamo"}


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


def dynamo_requests(rng: random.Random, sessions: int, block: int, agentic: bool) -> list[dict]:
    """``dynamo.request.trace.v1`` records: sessions of requests, child sessions (some named by
    a tool record with a consumer, some found by time), and a skipped tool_start."""
    out: list[dict] = []
    nxt = [500]

    def new(n: int) -> list[int]:
        ids = list(range(nxt[0], nxt[0] + n))
        nxt[0] += n
        return ids

    def request(rid: str, start: int, dur: int, hashes: list[int], ctx: dict | None) -> dict:
        rec = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
               "event_time_unix_ms": start + dur,
               "request": {"request_id": rid, "model": "m", "output_tokens": rng.randint(4, 40),
                           "request_received_ms": start, "total_time_ms": dur + 0.4,
                           "replay": {"trace_block_size": block,
                                      "input_length": len(hashes) * block - rng.randrange(block),
                                      "input_sequence_hashes": hashes}}}
        if ctx is not None:
            rec["agent_context"] = ctx
        return rec

    for s in range(sessions):
        t = 1_000_000 + s * rng.randint(5, 60)
        hashes = new(3)
        for k in range(rng.randint(3, 6)):
            dur = rng.randint(20, 200)
            rid = f"s{s}r{k}"
            out.append(request(rid, t, dur, hashes, {"session_id": f"s{s}"} if agentic else None))
            t += dur + rng.randint(1, 80)
            if agentic and k == 1:  # a child session found by time, joined by the next request
                ct, ch = t - 30, hashes[:2] + new(1)
                for j in range(2):
                    out.append(request(f"s{s}c{j}", ct, 40, ch, {"session_id": f"s{s}c",
                                                                   "parent_session_id": f"s{s}"}))
                    ct += 50
                    ch = ch + new(1)
                t = ct + 20
            if agentic and k == 2:  # a child named by a tool record, with its consumer
                child = f"s{s}t"
                out.append({"schema": "dynamo.request.trace.v1", "event_type": "tool_start",
                            "event_time_unix_ms": t})
                out.append({"schema": "dynamo.request.trace.v1", "event_type": "tool_end",
                            "event_time_unix_ms": t + 90, "agent_context": {"session_id": f"s{s}"},
                            "tool": {"tool_call_id": f"call{s}", "tool_class": "agent",
                                     "started_at_unix_ms": t, "ended_at_unix_ms": t + 90,
                                     "claude": {"source_request_id": rid,
                                                "consumer_request_id": f"s{s}r{k + 1}",
                                                "child_session_id": child,
                                                "execution_mode": "blocking"}}})
                out.append(request(f"s{s}t0", t + 5, 60, new(2), {"session_id": child,
                                                                 "parent_session_id": f"s{s}"}))
                t += 90
            hashes = hashes + new(rng.randint(1, 2))
    rng.shuffle(out)  # the reader orders requests by time itself
    return out


def write_samples() -> None:
    rng = random.Random(44)
    (HERE / "weka_sample.jsonl").write_text(
        "".join(json.dumps(weka_play(rng, p, 32, False)) + "\n" for p in range(6)))
    (HERE / "weka_relative.jsonl").write_text(
        "".join(json.dumps(weka_play(rng, p, 32, True)) + "\n" for p in range(4)))
    (HERE / "dynamo_request_sample.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in dynamo_requests(random.Random(9), 4, 16, True)))
    (HERE / "dynamo_request_standard.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in dynamo_requests(random.Random(10), 3, 16, False)))
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
            sets = {"trace_format": PEER_FORMAT.get(fmt, fmt), "report_jsonl_path": str(report),
                    **peer_keys, "engine": engine}
            if CASES[name][0] != "dynamo_request_standard.jsonl":  # every agentic graph
                sets["execution_model"] = "m"
            args = [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]
            subprocess.run([sys.executable, str(PEER), str(HERE / trace), *args], check=True,
                           stdout=subprocess.DEVNULL)
            rows = [json.loads(x) for x in report.read_text().splitlines() if x.strip()]
        if all(r["uuid"].startswith("00000000-0000-0000-0000-") for r in rows):
            rows.sort(key=lambda r: r["uuid"])  # an agentic graph: uuid = node index + 1
            nodes = [int(r["uuid"].replace("-", ""), 16) - 1 for r in rows]
        else:  # plain requests get random uuids: arrival order is servesim's request order
            rows.sort(key=lambda r: r["arrival_time_ms"])
            nodes = list(range(len(rows)))
        out = {"peer": "dynamo-mocker 1.6.1 (benchmarks/peer_dynamo_agentic.py)",
               "trace": trace, "format": fmt, "peer_keys": peer_keys, "engine": engine,
               "servesim_sets": CASES[name][4],
               "requests": [{"node": node,
                             **{k: r[k] for k in KEPT},
                             "first_admission_reused_tokens": (
                                 r["admission_history"][0]["reused_input_tokens"]
                                 if r["admission_history"] else None),
                             "admissions": len(r["admission_history"])}
                            for node, r in zip(nodes, rows, strict=True)]}
        (HERE / f"{name}.expected.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
        print(name, len(rows), "requests,", sum(max(0, r["admissions"] - 1) for r in out["requests"]),
              "readmissions,", sum(r["terminal_status"] != "completed" for r in out["requests"]),
              "not completed")


if __name__ == "__main__":
    main()
