"""Placeholders for prompt blocks no other request can share (mark_unique_prompts,
TokenSeq.block_hashes_elided): which blocks qualify, and that a replay using them is
byte-identical to one that hashes every block."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.sections import ReportConfig
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.event_readers import EventReaders, hand_readers
from servesim.fast.overlay import FastOverlay
from servesim.kv.hashing import _PlaceholderCounter
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter, RoundRobinRouter
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.testing.strategies import mooncake_lines
from servesim.timing import PolynomialTiming
from servesim.tokens import RepeatedBlockTokens, Tokens
from servesim.workload.model import Session, Turn, make_workload, mark_unique_prompts
from servesim.workload.mooncake import MooncakeTrace
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank
from servesim_vllm.rank import VllmRank


def _workload(*prompts: Any) -> Any:
    return make_workload(
        [Session(str(i), 0.0, [Turn(i, p, 4)]) for i, p in enumerate(prompts)], "t")


def test_marks_the_first_trace_block_no_other_prompt_holds() -> None:
    a = RepeatedBlockTokens([1, 2, 3], 4)
    b = RepeatedBlockTokens([1, 2, 9], 4)
    c = RepeatedBlockTokens([1, 5], 4, length=5)  # id 5 has one token in the prompt only
    assert mark_unique_prompts(_workload(a, b, c)) == 2
    assert (a.unique_from, b.unique_from, c.unique_from) == (8, 8, None)


def test_ids_equal_in_their_low_32_bits_are_the_same_token() -> None:
    a = RepeatedBlockTokens([7, 1 << 32 | 8], 4)
    b = RepeatedBlockTokens([7, 8, 11], 4)
    assert mark_unique_prompts(_workload(a, b)) == 1
    assert (a.unique_from, b.unique_from) == (None, 8)
    c = RepeatedBlockTokens([7, -1], 4)  # -1 and 2**32 - 1 are the same token
    d = RepeatedBlockTokens([7, (1 << 32) - 1, 12], 4)
    assert mark_unique_prompts(_workload(c, d)) == 1
    assert (c.unique_from, d.unique_from) == (None, 8)


def test_nothing_is_marked_beside_explicit_tokens_or_one_token_blocks() -> None:
    a = RepeatedBlockTokens([1, 2], 4)
    assert mark_unique_prompts(_workload(a, Tokens([1, 1, 1, 1]))) == 0
    assert mark_unique_prompts(_workload(RepeatedBlockTokens([3, 4], 1))) == 0
    assert mark_unique_prompts(_workload(RepeatedBlockTokens([3], 4),
                                         RepeatedBlockTokens([4], 8))) == 0


def test_elided_hashes_keep_the_shareable_prefix_and_use_placeholders_after_it() -> None:
    p = RepeatedBlockTokens([1, 2, 3, 4], 4)
    p.unique_from = 8  # trace block 2
    real = p.block_hashes(2)[0]
    seq, loc = p.block_hashes_elided(2)
    # Blocks 0-3 (tokens 0..7) can be shared; block 4 ends at token 10 >= 8 + 2.
    assert seq[:4] == real[:4] and loc[:4] == p.block_hashes(2)[1][:4]
    assert len(seq) == len(real) == 8
    assert all(h < 0 for h in seq[4:]) and len(set(seq[4:])) == 4
    # Cached: the same two lists (a compiled build boxes a fresh tuple around them).
    assert all(x is y for x, y in zip(p.block_hashes_elided(2), p.block_hashes_elided(2), strict=True))
    # Block size 3: block 2 holds tokens 6..8, only one of them from the unique block.
    seq3 = p.block_hashes_elided(3)[0]
    assert seq3[:3] == p.block_hashes(3)[0][:3] and all(h < 0 for h in seq3[3:])
    # shared_blocks counts the real (shareable) prefix of the elided hashes.
    assert (p.shared_blocks(2), p.shared_blocks(3)) == (4, 3)
    for bs in (1, 2, 3, 4, 5, 16):
        elided = p.block_hashes_elided(bs)[0]
        assert p.shared_blocks(bs) == next((i for i, h in enumerate(elided) if h < 0), len(elided))
    q = RepeatedBlockTokens([1, 2], 4)
    assert q.shared_blocks(2) == 4 and Tokens([1, 2, 3, 4, 5]).shared_blocks(2) == 2


BLOCK = 4


@st.composite
def cases(draw: Any) -> dict:
    return dict(
        lines=draw(mooncake_lines()),
        workers=draw(st.sampled_from([1, 2])),
        kv=draw(st.booleans()),
        blocks=draw(st.sampled_from([12, 30, 4096])),
        trace_block=draw(st.sampled_from([2, 4, 8])),
        engine_block=draw(st.sampled_from([1, 2, 4])),
        # trtllm's MAX_UTILIZATION pauses requests, which re-hit their own blocks.
        backend=draw(st.sampled_from(["vllm", "vllm", "trtllm-gne", "trtllm-mu"])),
    )


def _replay(case: dict, elide: bool) -> tuple[str, list[str]]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", case["trace_block"])
    if elide:
        mark_unique_prompts(workload)
    bs = case["engine_block"]
    workers = case["workers"]
    router = (KvRouter if case["kv"] else RoundRobinRouter)(workers, 1, bs)
    cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=bs)
    backend = case.get("backend", "vllm")
    if backend == "vllm":
        factory = EngineFactory(cfg, VllmRank, PolynomialTiming(), emit_kv_events=case["kv"])
    else:
        policy = (CapacitySchedulerPolicy.MAX_UTILIZATION if backend == "trtllm-mu"
                  else CapacitySchedulerPolicy.GUARANTEED_NO_EVICT)
        factory = EngineFactory(cfg, TrtllmRank, PolynomialTiming(), emit_kv_events=case["kv"],
                                backend_config=TrtllmConfig(capacity_scheduler_policy=policy))
    if case["kv"]:
        hand_readers(factory, EventReaders(kv_router_only=True))
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, workers), workload, router=router, block_size=bs,
                  record_token_times=True, speed=FastOverlay(runs=True))
    log = rp.run()
    return dumps(build_report(log, ReportConfig())), list(per_request_lines(log))


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_replay_with_placeholders_is_byte_identical(case: dict) -> None:
    assert _replay(case, elide=True) == _replay(case, elide=False)


def test_a_preempted_request_hits_its_own_placeholder_blocks() -> None:
    # Two unique prompts of 6 blocks growing to 12 on a 20-block pool: the newer one is
    # preempted (LIFO) and readmitted reusing 8 of its own blocks (16 tokens, generated ones
    # included), all of them placeholders, exactly as with real hashes.
    lines = [json.dumps({"timestamp": 0, "hash_ids": [10 + i, 20 + i, 30 + i],
                         "output_length": 12}) for i in range(2)]
    case = dict(lines=lines, workers=1, kv=False, blocks=20, trace_block=4, engine_block=2)
    before = _PlaceholderCounter.next
    report, rows = _replay(case, elide=True)
    elided = _PlaceholderCounter.next - before
    assert (report, rows) == _replay(case, elide=False)
    # Prompt blocks took placeholders too, not only the generated ones.
    assert elided > _PlaceholderCounter.next - before - elided
    assert json.loads(report)["num_preemptions"] == 1
    assert [json.loads(r)["reused_input_tokens"] for r in rows] == [0, 16]


def test_a_paused_trtllm_request_hits_its_own_placeholder_blocks() -> None:
    """The trtllm rank elides too: under MAX_UTILIZATION the newer of two unique prompts is
    paused and readmitted reusing 16 tokens of its own placeholder blocks, as with real
    hashes."""
    lines = [json.dumps({"timestamp": 0, "hash_ids": [10 + i, 20 + i, 30 + i],
                         "output_length": 12}) for i in range(2)]
    case = dict(lines=lines, workers=1, kv=False, blocks=20, trace_block=4, engine_block=2,
                backend="trtllm-mu")
    before = _PlaceholderCounter.next
    report, rows = _replay(case, elide=True)
    assert _PlaceholderCounter.next - before == 22  # 11 full blocks each, none hashed
    assert (report, rows) == _replay(case, elide=False)
    assert json.loads(report)["num_preemptions"] == 1
    assert [json.loads(r)["reused_input_tokens"] for r in rows] == [0, 16]
