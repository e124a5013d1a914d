"""Disaggregated replay invariants on random small workloads, for every backend (hypothesis).

Whatever the pools, worker counts, DP sizes, transfer times and cancellations: every request
ends exactly once (completed, or failed when it can never fit or was cancelled), a completed
request got exactly its output tokens, every worker ends drained with no KV held, and TTFT's
three parts add up to TTFT.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.plugins import Plugins
from servesim.replay.disagg import build_disagg_replayer
from servesim.replay.runner import load_workload

PLUGINS = Plugins()
rows_st = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 6), st.integers(0, 5), st.integers(1, 6)),
    min_size=1, max_size=12,
)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    backend=st.sampled_from(["vllm", "trtllm", "sglang"]),
    rows=rows_st,
    prefill_blocks=st.integers(4, 24),
    decode_blocks=st.integers(4, 24),
    workers=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    dp=st.integers(1, 2),
    latency=st.sampled_from([0.0, 3.0]),
    cancel=st.one_of(st.none(), st.tuples(st.integers(0, 11), st.integers(0, 60))),
)
def test_every_request_ends_once_and_every_worker_drains(
    backend: str,
    rows: list[tuple[int, int, int, int]],
    prefill_blocks: int,
    decode_blocks: int,
    workers: tuple[int, int],
    dp: int,
    latency: float,
    cancel: tuple[int, int] | None,
) -> None:
    tmp = Path(tempfile.mkdtemp())
    # (gap, prompt blocks of 8 tokens, shared leading blocks, output tokens)
    lines, t = [], 0
    for i, (gap, blocks, shared, out) in enumerate(rows):
        t += gap
        hashes = [k for k in range(min(shared, blocks))] + [1000 * (i + 1) + k for k in range(blocks)]
        hashes = hashes[:blocks]
        lines.append(json.dumps({"timestamp": t, "input_length": 8 * blocks - i % 3,
                                 "output_length": out, "hash_ids": hashes}))
    (tmp / "t.jsonl").write_text("\n".join(lines) + "\n")
    cfg = {
        "engine": {"backend": backend, "block_size": 8, "dp_size": dp,
                   "timing_model": {"type": "fixed", "prefill_ms": 4.0, "decode_ms": 1.0}},
        "cluster": {"prefill_workers": workers[0], "decode_workers": workers[1], "router": "kv",
                    "handoff_latency_ms": latency,
                    "prefill_engine": {"num_gpu_blocks": prefill_blocks},
                    "decode_engine": {"num_gpu_blocks": decode_blocks}},
        "workload": {"trace": {"path": str(tmp / "t.jsonl"), "trace_block_size": 8}},
    }
    (tmp / "sim.yaml").write_text(json.dumps(cfg))
    loaded = load_config(str(tmp / "sim.yaml"), (), PLUGINS)
    workload = load_workload(loaded.sim.workload, loaded.plugins)
    rp = build_disagg_replayer(loaded, workload, [], [])
    if cancel is not None and cancel[0] < len(rows):
        rp.cancel_at(cancel[0], float(cancel[1]))
    log = rp.run()  # raises if a request never ends or a worker is left holding state
    for engine in rp.engines:
        assert engine.is_drained()
        for rank in engine.ranks:
            metrics = rank.metrics()
            assert metrics.running_requests == 0 and metrics.waiting_requests == 0
    act = rp.times["destination_activated_ms"]
    held = rp.times["source_held_ms"]
    for rid in range(log.n):
        assert log.done[rid] >= log.arrival[rid] >= 0
        if log.rejected[rid]:
            continue
        turn = workload.turns()[rid]
        expected = turn.output_length
        if backend == "trtllm":  # TRT-LLM clamps the output to the pool (dynamo-mocker.md §6)
            expected = min(expected, 8 * decode_blocks - len(turn.prompt))
        assert log.ntok[rid] == expected
        assert rid not in rp.cancelled
        if log.ntok[rid]:
            assert log.arrival[rid] <= held[rid] <= act[rid] < log.first[rid]
