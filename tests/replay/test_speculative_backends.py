"""Speculative decoding on every backend, through the replayer: random workloads keep the
invariants (aisimulate-engine.md §10): a request emits at most ``aic_nextn + 1`` tokens per
pass, every output token is delivered exactly once, acceptance stays within the drafts, and
the replay drains (the replayer raises when a worker is left holding work)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.replay.runner import simulate

workloads = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2), st.integers(1, 300),
                               st.integers(1, 40)), min_size=1, max_size=12)


def write_trace(path: Path, spec: list[tuple[int, int, int, int]]) -> list[int]:
    t, lines, outs = 0, [], []
    for i, (gap, group, isl, osl) in enumerate(spec):
        t += gap + 1  # distinct arrivals
        blocks = -(-isl // 64)
        hashes = [group * 1000 + k for k in range(blocks // 2)]
        hashes += [10_000 + i * 100 + k for k in range(blocks - len(hashes))]
        lines.append(json.dumps({"timestamp": t, "input_length": isl, "output_length": osl,
                                 "hash_ids": hashes}))
        outs.append(osl)
    path.write_text("\n".join(lines) + "\n")
    return outs


@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(backend=st.sampled_from(["vllm", "sglang", "trtllm"]), spec=workloads,
       nextn=st.integers(1, 5), blocks=st.sampled_from([40, 400]),
       rates=st.sampled_from(["0.85,0.3", "1,1,1,1,1", "0.5,0.9"]), seed=st.integers(0, 3))
def test_speculative_replays_keep_the_invariants(tmp_path: Path, backend: str, spec: list,
                                                 nextn: int, blocks: int, rates: str,
                                                 seed: int) -> None:
    outs = write_trace(tmp_path / "trace.jsonl", spec)
    engine = {"backend": backend, "aic_nextn": nextn, "aic_nextn_accept_rates": rates,
              "aic_mtp_seed": seed, "num_gpu_blocks": blocks * (64 if backend == "sglang" else 1)}
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(json.dumps({"engine": engine, "workload": {"trace": {
        "path": str(tmp_path / "trace.jsonl"), "trace_block_size": 64}}}))
    result = simulate(load_config(str(cfg)), record_token_times=True)
    log = result.log
    for rid, osl in enumerate(outs):
        if log.rejected[rid]:
            continue
        times = log.token_times[rid]
        assert len(times) == osl  # every token, once
        assert max(times.count(t) for t in set(times)) <= nextn + 1  # one burst per pass at most
    rep = result.report
    assert rep["spec_decode_num_accepted_tokens"] <= rep["spec_decode_num_draft_tokens"]
    assert all(n <= rep["spec_decode_num_drafts"] for n in rep["spec_decode_num_accepted_tokens_per_pos"])
    assert rep["spec_decode_mean_acceptance_length"] is None or (
        1.0 <= rep["spec_decode_mean_acceptance_length"] <= nextn + 1)
