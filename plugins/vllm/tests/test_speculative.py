"""Speculative decoding on the vllm rank (dynamo-mocker.md §8.1, aisimulate-engine.md §10).

Fixed timing (prefill 10 ms, decode 2 ms) with recorded calls; acceptance rates of 0 and 1
make every burst exact.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig, PreemptionMode
from servesim.contract import HandoffId, Request, Submit, SubmitHandoffPrefill, WorkerType
from servesim.engine import Engine
from servesim.testing.driver import drive
from servesim.tokens import Tokens
from servesim_vllm.rank import VllmRank
from vllm_helpers import RecordingTiming, make_engine, req, shared_prefix_requests


def step(eng: Engine, now: float):
    s = eng.execute_pass(now)
    assert s is not None
    return s.end_ms, eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects


def spec_engine(timing: RecordingTiming, rates: str, nextn: int = 2, **kw) -> Engine:
    kw.setdefault("block_size", 4)
    kw.setdefault("num_gpu_blocks", 64)
    return make_engine(timing, aic_nextn=nextn, aic_nextn_accept_rates=rates, **kw)


def test_a_burst_is_stamped_at_the_pass_end_and_leaves_one_dangling_token() -> None:
    t = RecordingTiming()
    eng = spec_engine(t, "1,1")
    eng.apply(0, Submit(req(1, 6, 8)), 0.0)
    # Pass 1: prefill, then the verification forward over the request that just prefilled.
    end, eff = step(eng, 0.0)
    assert end == 12.0 and t.prefill_calls == [(1, 6, 0)] and t.decode_calls == [(1, 6, 6, 256)]
    assert eff.outputs.token_request_ids == [1, 1, 1]  # base token + 2 accepted drafts
    state = eng.ranks[0].sched.requests[1]
    assert (state.length, state.computed, state.generated) == (9, 8, 3)
    assert len(state.table.ids) == 3  # blocks for all 9 known tokens, the dangling one too
    assert eff.decode_acceptance.forwards == 1 and eff.decode_acceptance.accepted_tokens == 3
    assert eff.decode_acceptance.accepted_per_pos == (1, 1)
    # Pass 2: the dangling token is scheduled as a one-token decode; 3 more tokens.
    end, eff = step(eng, end)
    assert end == 14.0 and eff.outputs.token_request_ids == [1, 1, 1]
    # Pass 3: only 2 outputs left; the burst is clamped, the acceptance count is not.
    end, eff = step(eng, end)
    assert eff.outputs.token_request_ids == [1, 1] and eff.outputs.completed == [1]
    assert eff.decode_acceptance.accepted_tokens == 3
    assert eng.ranks[0].sched.pool.num_active == 0


def test_rejected_drafts_emit_one_token_per_forward() -> None:
    t = RecordingTiming()
    eng = spec_engine(t, "0", nextn=1)
    r = drive(eng, [(0.0, req(1, 5, 4))])
    assert r.requests[1].token_times == [12.0, 14.0, 16.0, 18.0]
    accepted = sum(c.by_rank[0].effects.decode_acceptance.accepted_tokens for c in r.completions)
    forwards = sum(c.by_rank[0].effects.decode_acceptance.forwards for c in r.completions)
    assert (accepted, forwards) == (4, 4)


def test_prefill_worker_emits_one_token_per_pass_and_prices_no_decode() -> None:
    t = RecordingTiming()
    eng = spec_engine(t, "1,1", worker_type=WorkerType.PREFILL, kv_bytes_per_token=1.0,
                      kv_transfer_bandwidth=1.0)
    eng.apply(0, SubmitHandoffPrefill(HandoffId(1), req(1, 6, 5)), 0.0)
    end, eff = step(eng, 0.0)
    assert end == 10.0 and t.decode_calls == []
    assert eff.outputs.token_request_ids == [1] and eff.decode_acceptance.forwards == 0


def test_the_burst_reservation_preempts_when_blocks_run_out() -> None:
    # 4 blocks of 4: two 7-token prompts fit (2 blocks each), but their bursts of 3 need a
    # third block each: the newest (LIFO) is preempted before any token is sampled.
    t = RecordingTiming()
    eng = spec_engine(t, "1,1", num_gpu_blocks=4)
    eng.apply(0, Submit(req(1, 7, 6)), 0.0)
    eng.apply(0, Submit(req(2, 7, 6)), 0.0)
    s = eng.execute_pass(0.0)
    assert [p.request_id for p in s.by_rank[0].effects.pressure_events] == [2]
    eff = eng.complete_pass(s.pass_id, s.end_ms).by_rank[0].effects
    assert eff.outputs.token_request_ids == [1, 1, 1]


def test_one_more_block_of_a_prefix_hit_is_recomputed() -> None:
    t = RecordingTiming()
    shared = list(range(16))
    eng = spec_engine(t, "0", nextn=1)
    r = drive(eng, [(0.0, Request(1, Tokens(shared + [100, 101]), 1)),
                    (50.0, Request(2, Tokens(shared + [200, 201]), 1))])
    hits = [a.reused_input_tokens for p in r.passes for a in p.by_rank[0].effects.admissions]
    assert hits == [0, 12]  # 4 cached blocks, the last recomputed for the drafter


def test_runs_decline_with_speculation() -> None:
    eng = spec_engine(RecordingTiming(), "1,1")
    eng.apply(0, Submit(req(1, 5, 40)), 0.0)
    end, _ = step(eng, 0.0)
    assert eng.execute_run(end, float("inf")) is None


def test_decode_speedup_ratio_is_refused_with_aic_nextn() -> None:
    from servesim.config.checks import check_engine
    problems = check_engine(EngineConfig(aic_nextn=2, decode_speedup_ratio=2.0))
    assert ("engine.decode_speedup_ratio", "expected 1.0 when aic_nextn is set, got 2.0") in problems
    assert VllmRank.validate_config(EngineConfig(aic_nextn=2, block_size=4), None) == []


configs = st.fixed_dictionaries({
    "block_size": st.sampled_from([2, 4, 8]),
    "num_gpu_blocks": st.integers(6, 30),
    "max_num_seqs": st.integers(1, 6),
    "max_num_batched_tokens": st.integers(8, 40),
    "enable_prefix_caching": st.booleans(),
    "preemption_mode": st.sampled_from(list(PreemptionMode)),
    "aic_nextn": st.integers(1, 5),
    "aic_nextn_accept_rates": st.sampled_from(["0.85,0.3", "1,1,1,1,1", "0.5,0.5,0.5", "0"]),
    "aic_mtp_seed": st.integers(0, 5),
})
workloads = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 2), st.integers(1, 24),
                               st.integers(0, 15)), min_size=1, max_size=10)


@settings(max_examples=80, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, spec=workloads)
def test_random_speculative_workloads_deliver_every_token_once(cfg: dict, spec: list) -> None:
    arrivals = shared_prefix_requests(spec)
    eng = make_engine(RecordingTiming(), **cfg)
    r = drive(eng, arrivals, max_passes=20_000)
    nextn = cfg["aic_nextn"]
    for c in r.completions:
        eff = c.by_rank[0].effects
        out = eff.outputs.token_request_ids
        for rid in set(out):
            assert out.count(rid) <= nextn + 1  # one forward's burst at most
        acc = eff.decode_acceptance
        assert acc.accepted_tokens <= acc.forwards * (nextn + 1)
        assert all(n <= acc.forwards for n in acc.accepted_per_pos)
    for _, rq in arrivals:
        trace = r.requests[rq.request_id]
        if not trace.rejected:
            assert len(trace.token_times) == rq.max_output_tokens  # every token, once
            assert trace.token_times == sorted(trace.token_times)
    sched = eng.ranks[0].sched
    assert not sched.requests and sched.pool.num_active == 0  # no leaked blocks
