"""Disaggregated replay with runs of passes on the decode pool against forced stepping.

Random small workloads on vLLM prefill and decode pools (KV or round-robin prefill routing,
one or more workers per pool, transfer latencies, tight or roomy decode pools, prefix
caching on or off, sessions and concurrency limits, cancellations): the report JSON (with
its handoff keys) and the per-request lines (with their handoff fields) must be
byte-identical to stepping's, and to a replay whose decode ranks hash every block. A
deterministic case pins that the decode pool does run.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.loader import load_config
from servesim.fast.overlay import FastOverlay
from servesim.plugins import Plugins
from servesim.replay.disagg import DisaggReplayer, build_disagg_replayer
from servesim.replay.runner import load_workload
from servesim.report.summary import build_report, dumps, per_request_lines

PLUGINS = Plugins()


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 14))
    rows = []
    t = 0
    for i in range(n):
        t += draw(st.integers(0, 30))
        blocks = draw(st.integers(1, 5))
        shared = draw(st.integers(0, 2))
        rows.append((t, blocks, shared, draw(st.integers(1, 40)), draw(st.integers(0, 2)), i))
    return dict(
        rows=rows,
        router=draw(st.sampled_from(["kv", "kv", "round_robin"])),
        workers=draw(st.tuples(st.integers(1, 2), st.integers(1, 3))),
        latency=draw(st.sampled_from([0.0, 0.0, 1.5, 7.0])),
        decode_blocks=draw(st.sampled_from([12, 40, 4096])),
        prefill_blocks=draw(st.sampled_from([16, 4096])),
        caching=draw(st.booleans()),
        timing=draw(st.sampled_from(["fixed", "poly"])),
        sessions=draw(st.sampled_from([False, False, True])),
        concurrency=draw(st.sampled_from([None, None, 2])),
        cap=draw(st.sampled_from([None, None, 1, 2])),
        cancel=draw(st.one_of(st.none(), st.tuples(st.integers(0, 13), st.integers(0, 200)))),
        token_times=draw(st.booleans()),
        # a small prefill token budget chunks prompts over several prefill passes, most of
        # which hand nothing off (the decode runs are bounded by their ends all the same)
        prefill_budget=draw(st.sampled_from([None, None, 16])),
        # few decode sequences: a run's first pass may not admit every activated destination
        decode_seqs=draw(st.sampled_from([None, None, 2])),
    )


def _replay(case: dict[str, Any], runs: bool, real_decode_hashes: bool = False
            ) -> tuple[str, list[str], DisaggReplayer]:
    tmp = Path(tempfile.mkdtemp())
    lines = []
    for t, blocks, shared, out, delay, i in case["rows"]:
        hashes = list(range(min(shared, blocks))) + [1000 * (i + 1) + k for k in range(blocks)]
        rec: dict[str, Any] = {"timestamp": t, "input_length": 8 * blocks - i % 3,
                               "output_length": out, "hash_ids": hashes[:blocks]}
        if case["sessions"]:
            rec = {"session_id": f"s{i % 3}", **rec}
            if i >= 3:  # a later turn: released after the previous one, plus its delay
                del rec["timestamp"]
                rec["delay"] = delay * 5
        lines.append(json.dumps(rec))
    (tmp / "t.jsonl").write_text("\n".join(lines) + "\n")
    timing = ({"type": "fixed", "prefill_ms": 4.0, "decode_ms": 1.0} if case["timing"] == "fixed"
              else {"type": "polynomial"})
    workload: dict[str, Any] = {"trace": {"path": str(tmp / "t.jsonl"), "trace_block_size": 8}}
    if case["concurrency"] is not None:
        workload["concurrency"] = case["concurrency"]
    elif case.get("cap") is not None:
        workload["max_concurrency"] = case["cap"]
    cfg = {
        "engine": {"backend": "vllm", "block_size": 8, "timing_model": timing,
                   "enable_prefix_caching": case["caching"]},
        "cluster": {"prefill_workers": case["workers"][0], "decode_workers": case["workers"][1],
                    "router": case["router"], "handoff_latency_ms": case["latency"],
                    "prefill_engine": {"num_gpu_blocks": case["prefill_blocks"],
                                       **({} if case.get("prefill_budget") is None else
                                          {"max_num_batched_tokens": case["prefill_budget"]})},
                    "decode_engine": {"num_gpu_blocks": case["decode_blocks"],
                                      **({} if case.get("decode_seqs") is None else
                                         {"max_num_seqs": case["decode_seqs"]})}},
        "workload": workload,
    }
    (tmp / "sim.yaml").write_text(json.dumps(cfg))
    loaded = load_config(str(tmp / "sim.yaml"), (), PLUGINS)
    wl = load_workload(loaded.sim.workload, loaded.plugins)
    rp = build_disagg_replayer(loaded, wl, [], [], record_metrics=not runs, speed=FastOverlay(runs=runs),
                               concurrency=loaded.sim.workload.concurrency,
                               max_concurrency=loaded.sim.workload.max_concurrency,
                               record_token_times=case["token_times"])
    if real_decode_hashes:  # every block of every request hashed on the decode ranks
        for engine in rp.engines[rp.num_prefill:]:
            engine.ranks[0].sched.lazy_hashes = False
    cancel = case["cancel"]
    if cancel is not None and cancel[0] < len(case["rows"]):
        rp.cancel_at(cancel[0], float(cancel[1]))
    log = rp.run()
    report = build_report(log, loaded.sim.report)
    report.update(rp.report_extras())
    log.extra = rp.per_request_extras()
    return dumps(report), list(per_request_lines(log, rp.session_of)), rp


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_disaggregated_replay_with_runs_is_byte_identical(case: dict[str, Any]) -> None:
    step = _replay(case, runs=False)
    run = _replay(case, runs=True)
    assert step[2].run_driver is None  # noqa: SLF001
    assert step[0] == run[0]
    assert step[1] == run[1]
    assert step[2].passes == run[2].passes


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_decode_ranks_may_elide_unshared_prompt_blocks(case: dict[str, Any]) -> None:
    """Without KV sinks nothing reads the decode ranks' hashes, so a destination's prompt
    takes the elided hashes (placeholders for blocks no other request can share) and
    generated blocks stay unhashed: the same bytes as hashing every block."""
    elided = _replay(case, runs=True)
    if case["caching"]:
        assert all(e.ranks[0].sched.lazy_hashes for e in elided[2].engines[elided[2].num_prefill:])
    real = _replay(case, runs=True, real_decode_hashes=True)
    assert elided[:2] == real[:2]


def test_the_decode_pool_runs_through_handoffs() -> None:
    """Long outputs on two decode workers behind one busy prefill worker: most decode passes
    are inside runs, requests complete inside runs, and the replay matches stepping."""
    rows = [(i * 3, 4, 0, 120 + 7 * i, 0, i) for i in range(10)]
    case = dict(rows=rows, router="kv", workers=(1, 2), latency=1.5, decode_blocks=4096,
                prefill_blocks=4096, caching=True, timing="poly", sessions=False,
                concurrency=None, cancel=None, token_times=False)
    report, lines, rp = _replay(case, runs=True)
    runs = rp.run_driver  # noqa: SLF001
    assert runs is not None
    decode_passes = rp.passes - sum(rp.engines[p].ranks[0].pass_counter
                                    for p in range(rp.num_prefill))
    assert runs.run_passes > 0.8 * decode_passes
    assert runs.completed_within > 0
    # activated destinations join the batch in a run's first pass (RankRun.admissions)
    assert runs.admitted > 0
    step = _replay(case, runs=False)
    assert (report, lines) == step[:2]
    assert json.loads(report)["completed"] == 10


def test_decode_runs_carry_on_where_no_handoff_reaches() -> None:
    """Two prefill workers chunking every prompt over two passes and three decode workers:
    a prefill pass end hands off to one decode worker at most (none after a first chunk), so
    the runs on the others carry on through it (RunDriver.continue_run), several times per
    run, and the replay matches stepping."""
    rows = [(i * 4, 4, 0, 60 + 5 * i, 0, i) for i in range(16)]
    case = dict(rows=rows, router="kv", workers=(2, 3), latency=1.5, decode_blocks=4096,
                prefill_blocks=4096, caching=True, timing="poly", sessions=False,
                concurrency=None, cancel=None, token_times=False, prefill_budget=16)
    report, lines, rp = _replay(case, runs=True)
    runs = rp.run_driver  # noqa: SLF001
    assert runs is not None
    assert runs.committed == 16
    assert runs.continued == 56
    step = _replay(case, runs=False)
    assert (report, lines) == step[:2]
    assert step[2].passes == rp.passes
    assert json.loads(report)["completed"] == 16
