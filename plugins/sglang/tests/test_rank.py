"""SglangRank behaviour: pass shape, timing inputs, admission, retraction, commands, metrics."""

from __future__ import annotations

from typing import Any

import pytest
from servesim.config.engine import EngineConfig, SchedulingPolicy
from servesim.config.loader import load_config
from servesim.contract import (
    CancelRequest,
    PressureKind,
    PressureState,
    Request,
    ResultKind,
    StoredBlocks,
    Submit,
    WorkerType,
)
from servesim.engine import Engine
from servesim.errors import CommandRejected, ConfigError, EngineError
from servesim.factory import EngineFactory
from servesim.kv.host_tier import NativeHostOffloadConfig
from servesim.testing.driver import drive
from servesim.timing.base import TimingModel
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig, scheduler_params
from servesim_sglang.rank import SglangRank


class RecordingTiming(TimingModel):
    """Fixed 10 ms prefill / 1 ms decode that records every call."""

    def __init__(self) -> None:
        self.prefill: list[tuple[int, int, int]] = []
        self.decode: list[tuple[int, int, int, int]] = []

    def predict_prefill_ms(self, batch_size: int, mean_isl: int, mean_prefix: int) -> float:
        self.prefill.append((batch_size, mean_isl, mean_prefix))
        return 10.0

    def predict_decode_ms(self, batch_size: int, active: int, mean_ctx: int, total: int) -> float:
        self.decode.append((batch_size, active, mean_ctx, total))
        return 1.0


def make_engine(
    engine: dict[str, Any] | None = None,
    sglang: dict[str, Any] | None = None,
    timing: TimingModel | None = None,
    *,
    kv_events: bool = False,
) -> Engine:
    factory = EngineFactory(
        EngineConfig(backend="sglang", **(engine or {})),
        SglangRank,
        timing or FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0)),
        backend_config=SglangConfig(**(sglang or {})),
        emit_kv_events=kv_events,
    )
    return factory.build(0)


def req(rid: int, tokens: list[int], out: int) -> Request:
    return Request(rid, Tokens(tokens), out)


def rank_of(engine: Engine) -> SglangRank:
    rank = engine.ranks[0]
    assert isinstance(rank, SglangRank)
    return rank


def admissions(result) -> list[tuple[int, int]]:
    return [
        (a.request_id, a.reused_input_tokens)
        for p in result.passes
        for r in p.by_rank
        for a in r.effects.admissions
    ]


# --------------------------------------------------------------------------- config


def test_defaults_follow_the_reference_table() -> None:
    sg = SglangConfig()
    assert (sg.schedule_policy, sg.max_prefill_tokens, sg.chunked_prefill_size) == ("fcfs", 16384, 8192)
    assert (sg.clip_max_new_tokens, sg.schedule_conservativeness) == (4096, 1.0)
    p = scheduler_params(EngineConfig(backend="sglang"), SglangConfig(schedule_policy="FIFO"), 1)
    assert p.policy == "fcfs" and p.page_size == 1 and p.max_running_requests == 256
    assert p.init_new_token_ratio == pytest.approx(0.7)
    assert p.min_new_token_ratio == pytest.approx(0.098)
    assert p.decay_step == pytest.approx((0.7 - 0.098) / 600)
    assert p.total_tokens == 16384
    assert SglangRank.default_block_size == 1 and SglangRank.config_class is SglangConfig


def test_validate_config_names_key_paths() -> None:
    bad = EngineConfig(backend="sglang", block_size=4, max_model_len=100, enable_chunked_prefill=False)
    problems = SglangRank.validate_config(bad, SglangConfig(page_size=8, chunked_prefill_size=10))
    paths = [p for p, _ in problems]
    assert paths == [
        "engine.max_model_len",
        "engine.enable_chunked_prefill",
        "engine.sglang.page_size",
        "engine.sglang.chunked_prefill_size",
    ]
    assert (
        SglangRank.validate_config(EngineConfig(backend="sglang", block_size=4), SglangConfig(page_size=4))
        == []
    )
    host = NativeHostOffloadConfig(num_host_blocks=8)
    unsupported = EngineConfig(backend="sglang", native_host_offload=host, worker_type=WorkerType.PREFILL,
                               block_size=0)
    assert [p for p, _ in SglangRank.validate_config(unsupported, SglangConfig())] == [
        "engine.block_size",
    ]
    prio = EngineConfig(backend="sglang", scheduling_policy=SchedulingPolicy.PRIORITY)
    assert SglangRank.validate_config(prio, SglangConfig()) == [
        ("engine.scheduling_policy", "priority preemption is modelled with SGLang 0.5.23's "
         "admission: set engine.sglang.profile: sglang-0.5.23 (or two_phase_admission: true), "
         "or engine.sglang.disable_priority_preemption: true"),
    ]
    # the host tier is a capability sglang does not declare (servesim.rank.HostOffload)
    with pytest.raises(ConfigError, match=r"engine.native_host_offload: native_host_offload needs "
                       r"the backend capability HostOffload \(servesim.rank.HostOffload\); "
                       r"backend 'sglang' \(plugin sglang from servesim-sglang"):
        load_config(None, ["engine.backend=sglang", "engine.native_host_offload={num_host_blocks: 8}"])
    assert SglangRank.validate_config(prio, SglangConfig(profile="sglang-0.5.23")) == []
    assert SglangRank.validate_config(prio, SglangConfig(disable_priority_preemption=True)) == []
    assert [p for p, _ in SglangRank.validate_config(
        prio, SglangConfig(priority_scheduling_preemption_threshold="x", disable_priority_preemption=1)
    )] == ["engine.sglang.disable_priority_preemption",
           "engine.sglang.priority_scheduling_preemption_threshold"]
    with pytest.raises(EngineError, match="engine.sglang.page_size: 2 differs"):
        make_engine({"block_size": 4}, {"page_size": 2})


def test_page_size_sets_the_block_size_when_block_size_is_unset() -> None:
    p = scheduler_params(EngineConfig(backend="sglang", num_gpu_blocks=10), SglangConfig(page_size=4), 1)
    assert p.page_size == 4 and p.total_tokens == 40
    assert SglangRank.default_block_size_for(SglangConfig(page_size=4)) == 4
    assert SglangRank.default_block_size_for(SglangConfig()) == 1
    factory = EngineFactory(
        EngineConfig(backend="sglang", num_gpu_blocks=10),
        SglangRank,
        FixedTiming(),
        backend_config=SglangConfig(page_size=4),
    )
    assert factory.config.block_size == 4
    rank = rank_of(factory.build(0))
    assert (rank.cache.page_size, rank.cache.total_pages) == (4, 10)


def test_unknown_schedule_policy_is_a_config_problem() -> None:
    problems = SglangRank.validate_config(EngineConfig(backend="sglang"), SglangConfig(schedule_policy="dfs"))
    assert [p for p, _ in problems] == ["engine.sglang.schedule_policy"]
    assert "unknown schedule_policy 'dfs'" in problems[0][1] and "lpm" in problems[0][1]


def test_attention_dp_normalisation() -> None:
    """aisimulate-engine.md §13.2: DP1 keeps (16, 2.0); DP4 gives chunk 4, conservativeness 0.6."""
    cfg, sg = (
        EngineConfig(backend="sglang"),
        SglangConfig(chunked_prefill_size=16, schedule_conservativeness=2.0),
    )
    one, four = scheduler_params(cfg, sg, 1), scheduler_params(cfg, sg, 4)
    assert (one.chunked_prefill_size, one.conservativeness) == (16, 2.0)
    assert four.chunked_prefill_size == 4 and four.conservativeness == pytest.approx(0.6)
    assert four.init_new_token_ratio == pytest.approx(0.42)
    with pytest.raises(ConfigError, match="engine.sglang.chunked_prefill_size"):
        scheduler_params(cfg, sg, 32)
    assert SglangRank.validate_config(EngineConfig(backend="sglang", dp_size=32), sg)[0][0] == (
        "engine.sglang.chunked_prefill_size"
    )


def test_dp4_prompt_runs_in_per_rank_chunks() -> None:
    timing = RecordingTiming()
    engine = make_engine({"dp_size": 4}, {"chunked_prefill_size": 16}, timing)
    result = drive(engine, [(0.0, req(1, list(range(16)), 1), 2)])
    assert timing.prefill == [(1, 4, 0), (1, 8, 4), (1, 12, 8), (1, 16, 12)]
    assert result.requests[1].token_times == [40.0]


def test_dp4_lower_conservativeness_admits_under_memory_pressure() -> None:
    """aisimulate-engine.md §13.2: a second request kept out under DP1 is admitted under DP4."""

    def second_admitted_at(dp: int) -> float:
        engine = make_engine({"dp_size": dp, "num_gpu_blocks": 1000})
        result = drive(
            engine, [(0.0, req(1, list(range(100)), 600)), (1.0, req(2, list(range(500, 600)), 450))]
        )
        return next(
            p.started_at_ms
            for p in result.passes
            for r in p.by_rank
            for a in r.effects.admissions
            if a.request_id == 2
        )

    assert second_admitted_at(4) == 10.0  # the pass right after the first prefill
    assert second_admitted_at(1) > 100.0  # waits until the decode reservation shrinks


# --------------------------------------------------------------------------- passes and timing


def test_prefill_pass_runs_alone_and_samples_the_first_token() -> None:
    """A prefill pass emits first tokens at its end (no decode time) and stalls decoders."""
    engine = make_engine(timing=FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=2.0)))
    result = drive(engine, [(0.0, req(1, [1] * 100, 3)), (5.0, req(2, [1] * 64 + [3] * 36, 3))])
    assert result.requests[1].token_times == [10.0, 22.0, 24.0]
    assert result.requests[2].token_times == [20.0, 22.0, 24.0]
    assert admissions(result) == [(1, 0), (2, 64)]
    assert result.requests[2].cached_tokens == 64


def test_chunked_prefill_timing_inputs_and_decode_inputs() -> None:
    """aisimulate-engine.md §6.3: chunks of a 10-token prompt with budget 4 give (1,4,0),
    (1,8,4), (1,10,8); the decode call sees the sequence length and the pool size."""
    timing = RecordingTiming()
    engine = make_engine({"num_gpu_blocks": 64}, {"chunked_prefill_size": 4}, timing)
    result = drive(engine, [(0.0, req(1, list(range(10)), 2))])
    assert timing.prefill == [(1, 4, 0), (1, 8, 4), (1, 10, 8)]
    assert timing.decode == [(1, 11, 11, 64)]
    assert result.requests[1].token_times == [30.0, 31.0]
    assert admissions(result) == [(1, 0)]  # one admission for all chunks


def test_identical_prompt_reuses_all_but_one_token() -> None:
    timing = RecordingTiming()
    prompt = list(range(40))
    result = drive(make_engine(timing=timing), [(0.0, req(1, prompt, 1)), (50.0, req(2, prompt, 1))])
    assert admissions(result) == [(1, 0), (2, 39)]
    assert result.requests[2].cached_tokens == 39
    assert timing.prefill == [(1, 40, 0), (1, 40, 39)]


def test_zero_output_request_finishes_without_a_token() -> None:
    result = drive(make_engine(), [(0.0, req(1, list(range(8)), 0))])
    assert result.requests[1].token_times == [] and result.requests[1].completed_ms == 10.0


def test_request_too_large_for_the_pool_is_rejected() -> None:
    result = drive(make_engine({"num_gpu_blocks": 32}), [(0.0, req(1, list(range(20)), 12))])
    trace = result.requests[1]
    assert trace.rejected and trace.token_times == [] and trace.completed_ms == 0.0


# --------------------------------------------------------------------------- retraction


def _retraction_run(**sglang: Any):
    engine = make_engine({"num_gpu_blocks": 44}, sglang)
    arrivals = [
        (0.0, req(0, list(range(100, 108)), 20)),
        (15.0, req(1, list(range(200, 208)), 12)),
        (16.0, req(2, list(range(300, 304)), 3)),
    ]
    return engine, drive(engine, arrivals)


def test_retraction_takes_the_fewest_outputs_and_requeues_at_the_back() -> None:
    _, result = _retraction_run()
    events = [e for p in result.passes for r in p.by_rank for e in r.effects.pressure_events]
    assert len(events) == 1
    ev = events[0]
    # request 0 has 16 outputs, request 1 only 11: request 1 goes
    assert (ev.at_ms, ev.kind, ev.request_id) == (35.0, PressureKind.SGLANG_RETRACTION, 1)
    assert ev.state_before == PressureState(2, None, 43)
    assert ev.state_after == PressureState(1, None, 43)  # its pages stay cached
    assert ev.request_active_blocks_before == 19
    assert (ev.logical_available_blocks_before, ev.required_blocks_before) == (1, 2)
    # request 2 waited since 16 ms and is admitted before the retracted request 1
    assert admissions(result) == [(0, 0), (1, 0), (2, 0), (1, 10)]
    assert [len(result.requests[i].token_times) for i in range(3)] == [20, 12, 3]
    assert [result.requests[i].completed_ms for i in range(3)] == [49.0, 59.0, 48.0]


def test_retraction_front_requeue_variant() -> None:
    _, result = _retraction_run(retraction_requeue="front", retraction_ratio="reset")
    assert [rid for rid, _ in admissions(result)][:4] == [0, 1, 1, 2]


@pytest.mark.parametrize(("rule", "ratio"), [("estimate", 1.0), ("reset", 0.7)])
def test_ratio_after_retraction(rule: str, ratio: float) -> None:
    """``estimate``: SGLang's ``min(1, (decoded + 20·n) / (max_new + 1))`` over the survivor
    (16 decoded, 20 max → 1.0); ``reset``: back to the initial 0.7."""
    engine = make_engine({"num_gpu_blocks": 44}, {"retraction_ratio": rule})
    engine.apply(0, Submit(req(0, list(range(100, 108)), 20)), 0.0)
    now, submitted = 0.0, False
    for _ in range(100):
        if now >= 15.0 and not submitted:
            engine.apply(0, Submit(req(1, list(range(200, 208)), 12)), now)
            submitted = True
        started = engine.execute_pass(now)
        assert started is not None
        now = started.end_ms
        engine.complete_pass(started.pass_id, now)
        if started.by_rank[0].effects.pressure_events:
            break
    assert now == 36.0
    assert rank_of(engine).sched.ratio == pytest.approx(ratio)


# --------------------------------------------------------------------------- cache contents


def test_decode_tokens_enter_the_radix_cache_and_finish_caches_whole_pages() -> None:
    engine = make_engine({"block_size": 4, "num_gpu_blocks": 64})
    prompt = list(range(50, 60))
    engine.apply(0, Submit(req(1, prompt, 5)), 0.0)
    rank = rank_of(engine)
    tokens = rank.requests[1].tokens  # grows in place as tokens are generated
    now = 0.0
    seen = []
    while not engine.is_drained():
        started = engine.execute_pass(now)
        assert started is not None
        now = started.end_ms
        engine.complete_pass(started.pass_id, now)
        live = rank.requests.get(1)
        if live is not None:
            seen.append(rank.cache.match_len(live.tokens, live.seq_len))
    # cached page-aligned prefix grows as tokens are generated: len 11, 12, 13, 14
    assert seen == [8, 12, 12, 12]
    assert len(tokens) == 15 and tokens[:10] == prompt
    assert rank.cache.match_len(tokens + [0], 16) == 12  # 15 tokens → 3 whole pages cached
    assert rank.cache.protected_size == 0 and rank.cache.used_pages == 3


# --------------------------------------------------------------------------- commands


def test_duplicate_submit_is_rejected_without_change() -> None:
    engine = make_engine()
    engine.apply(0, Submit(req(1, [1, 2, 3], 2)), 0.0)
    with pytest.raises(CommandRejected, match="already active"):
        engine.apply(0, Submit(req(1, [4, 5, 6], 9)), 0.0)
    rank = rank_of(engine)
    assert len(rank.sched.waiting) == 1 and rank.sched.waiting[0].tokens == [1, 2, 3]


def test_cancel_waiting_then_noop() -> None:
    engine = make_engine()
    engine.apply(0, Submit(req(1, [1, 2, 3], 2)), 0.0)
    first = engine.apply(0, CancelRequest(1), 0.0)
    assert first.result.kind is ResultKind.APPLIED and first.retired_requests == (1,)
    second = engine.apply(0, CancelRequest(1), 0.0)
    assert second.result.kind is ResultKind.NOOP and second.retired_requests == ()
    assert engine.is_drained()


def test_mid_pass_cancel_suppresses_pending_output_and_frees_kv() -> None:
    engine = make_engine({"num_gpu_blocks": 64})
    engine.apply(0, Submit(req(1, list(range(10)), 5)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    effects = engine.apply(0, CancelRequest(1), 5.0)
    assert effects.result.kind is ResultKind.APPLIED and effects.suppressed_pending_output
    assert effects.retired_requests == (1,)
    done = engine.complete_pass(started.pass_id, started.end_ms)
    assert done.by_rank[0].effects.outputs.token_request_ids == []
    rank = rank_of(engine)
    assert rank.cache.protected_size == 0 and rank.cache.used_pages == 11  # cached, unlocked
    assert engine.is_drained()


def test_cancel_of_a_request_finished_in_the_pass() -> None:
    for discard in (False, True):
        engine = make_engine()
        engine.apply(0, Submit(req(1, list(range(10)), 1)), 0.0)
        started = engine.execute_pass(0.0)
        assert started is not None
        effects = engine.apply(0, CancelRequest(1, discard_pending_output=discard), 5.0)
        assert effects.result.kind is ResultKind.NOOP
        assert effects.suppressed_pending_output is discard
        done = engine.complete_pass(started.pass_id, started.end_ms)
        assert done.by_rank[0].effects.outputs.token_request_ids == ([] if discard else [1])


def test_handoff_commands_on_unknown_handoffs() -> None:
    from servesim.contract import ActivateDestination, HandoffId, ReleaseSource

    engine = make_engine()
    assert engine.apply(0, ReleaseSource(HandoffId(1)), 0.0).result.kind is ResultKind.NOOP
    with pytest.raises(CommandRejected, match="unknown handoff"):
        engine.apply(0, ActivateDestination(HandoffId(1)), 0.0)


# --------------------------------------------------------------------------- effects


def test_kv_events_at_pass_end_with_core_hashes() -> None:
    engine = make_engine({"block_size": 4, "num_gpu_blocks": 64}, kv_events=True)
    prompt = list(range(7, 19))  # 12 tokens = 3 pages
    engine.apply(0, Submit(req(1, prompt, 3)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None and started.by_rank[0].effects.kv_events == ()
    done = engine.complete_pass(started.pass_id, started.end_ms)
    events = done.by_rank[0].effects.kv_events
    assert [e.event_id for e in events] == [0]
    data = events[0].data
    assert isinstance(data, StoredBlocks) and data.parent_hash is None
    assert [b.block_hash for b in data.blocks] == Tokens(prompt).block_hashes(4)[0]


def test_metrics_and_forward_pass_metrics() -> None:
    engine = make_engine({"num_gpu_blocks": 1000}, timing=FixedTiming(FixedTimingConfig(10.0, 2.0)))
    engine.apply(0, Submit(req(1, [1] * 100, 3)), 0.0)
    first = engine.execute_pass(0.0)
    assert first is not None
    engine.apply(0, Submit(req(2, [1] * 64 + [3] * 36, 3)), 5.0)
    done = engine.complete_pass(first.pass_id, first.end_ms).by_rank[0].effects
    assert done.metrics is not None and done.metrics.sglang_cache_hit_tokens == 0
    assert done.metrics.sglang_cache_total_tokens == 100
    assert (done.metrics.active_blocks, done.metrics.inactive_blocks, done.metrics.total_blocks) == (
        101,
        0,
        1000,
    )
    second = engine.execute_pass(10.0)
    assert second is not None
    eff = engine.complete_pass(second.pass_id, second.end_ms).by_rank[0].effects
    assert (eff.metrics.sglang_cache_hit_tokens, eff.metrics.sglang_cache_total_tokens) == (64, 100)
    fpm = eff.forward_pass_metrics
    assert (fpm.num_prefill_requests, fpm.sum_prefill_tokens, fpm.sum_prefill_kv_tokens) == (1, 36, 64)
    assert (fpm.num_decode_requests, fpm.duration_ms) == (0, 10.0)
    third = engine.execute_pass(20.0)
    assert third is not None
    eff = engine.complete_pass(third.pass_id, third.end_ms).by_rank[0].effects
    assert eff.metrics.sglang_cache_hit_tokens == 0
    fpm = eff.forward_pass_metrics
    assert (fpm.num_decode_requests, fpm.sum_decode_kv_tokens, fpm.var_decode_kv_tokens) == (2, 202, 0.0)
    assert fpm.duration_ms == 2.0 and eff.decode_acceptance.forwards == 2
    while not engine.is_drained():
        started = engine.execute_pass(third.end_ms)
        assert started is not None
        eff = engine.complete_pass(started.pass_id, started.end_ms).by_rank[0].effects
    # radix-resident pages count as active once everything finished: 103 tokens each
    # (the last token has a KV slot too), 64 of them shared
    assert eff.metrics.active_blocks == 103 + 39 and eff.metrics.running_requests == 0


@pytest.mark.parametrize(("resets", "ratio_after"), [(False, 0.3), (True, 0.7)])
def test_oom_after_a_shared_prefix_is_locked(resets: bool, ratio_after: float) -> None:
    """Admitting X locks the cached prefix P, so it stops being evictable and Y's allocation
    fails although the pass's budget (computed before) allowed it: admission stops there. The
    reference keeps ``new_token_ratio``; Gen-2 (``oom_resets_ratio``) resets it."""
    engine = make_engine({"num_gpu_blocks": 100}, {"oom_resets_ratio": resets})
    rank = rank_of(engine)
    prefix = list(range(1000, 1040))
    held = rank.cache.acquire([999] * 30, 0, 30)  # 30 pages pinned by someone else
    cached = rank.cache.acquire(prefix, 0, 40)
    assert held is not None and cached is not None
    rank.cache.finish(cached[0], prefix, 40)  # P: 40 evictable tokens, 30 free pages left
    rank.sched.ratio = 0.3
    engine.apply(0, Submit(req(1, prefix + list(range(10)), 1)), 0.0)
    engine.apply(0, Submit(req(2, list(range(2000, 2045)), 1)), 0.0)
    started = engine.execute_pass(0.0)
    assert started is not None
    assert [(a.request_id, a.reused_input_tokens) for a in started.by_rank[0].effects.admissions] == [(1, 40)]
    assert rank.sched.ratio == pytest.approx(ratio_after)
    assert [r.rid for r in rank.sched.waiting] == [2]


def test_schedule_record_of_prefill_decode_and_retraction() -> None:
    factory = EngineFactory(
        EngineConfig(backend="sglang", num_gpu_blocks=44),
        SglangRank,
        FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0)),
        record_schedule=True,
    )
    arrivals = [
        (0.0, req(0, list(range(100, 108)), 20)),
        (15.0, req(1, list(range(200, 208)), 12)),
        (16.0, req(2, list(range(300, 304)), 3)),
    ]
    result = drive(factory.build(0), arrivals)
    records = [c.by_rank[0].effects.schedule for c in result.completions]
    assert all(r is not None for r in records)
    first, second = records[0], records[1]
    assert (first.scheduled, first.new_hits, first.running, first.waiting) == ({0: 8}, {0: 0}, 1, 0)
    assert (second.scheduled, second.new_hits) == ({0: 1}, {})
    starts = [p.started_at_ms for p in result.passes]
    retract = records[starts.index(35.0)]
    assert retract.preempted == [1] and retract.scheduled == {0: 1}
    assert (retract.running, retract.waiting) == (1, 2)
    resume = records[starts.index(49.0)]
    assert resume.resumed == [1] and resume.new_hits == {1: 10} and resume.scheduled == {1: 9}
    finished = [rid for r in records for rid in r.finished]
    assert sorted(finished) == [0, 1, 2] and finished == [2, 0, 1]


def test_planned_output_token_ids_are_emitted_and_cached() -> None:
    engine = make_engine({"num_gpu_blocks": 64})
    planned = Request(1, Tokens([4, 4, 4, 4]), 99, output_token_ids=(7, 8, 9))
    engine.apply(0, Submit(planned), 0.0)
    emitted: list[int] = []
    now = 0.0
    while not engine.is_drained():
        started = engine.execute_pass(now)
        assert started is not None
        now = started.end_ms
        out = engine.complete_pass(started.pass_id, now).by_rank[0].effects.outputs
        emitted += out.token_ids or []
    assert emitted == [7, 8, 9]
    # the finished sequence (prompt + outputs) is in the radix cache
    assert rank_of(engine).cache.match_len([4, 4, 4, 4, 7, 8, 9], 7) == 7


def test_a_lone_request_that_fills_the_pool_ends_rejected_instead_of_stalling() -> None:
    """No-hang rule: 10 prompt tokens + 20 clipped reserve fit a 64-token pool, but 60 outputs
    do not; after 54 tokens the next one has no page even after eviction."""
    engine = make_engine({"num_gpu_blocks": 64}, {"clip_max_new_tokens": 20})
    result = drive(engine, [(0.0, req(1, list(range(10)), 60))])
    trace = result.requests[1]
    assert len(trace.token_times) == 54 and trace.rejected
    assert trace.completed_ms == trace.token_times[-1]
    rank = rank_of(engine)
    assert engine.is_drained() and rank.cache.protected_size == 0 and rank.cache.used_pages == 64


def test_a_retracted_request_that_can_never_return_ends_rejected() -> None:
    """No-hang rule: a waiting request that already produced tokens and whose sequence plus
    clipped reserve exceeds the pool ends rejected when nothing else runs."""
    engine = make_engine({"num_gpu_blocks": 64}, {"clip_max_new_tokens": 20})
    engine.apply(0, Submit(req(1, list(range(10)), 100)), 0.0)
    waiting = rank_of(engine).sched.waiting[0]
    for _ in range(40):  # as if it had decoded 40 tokens and been retracted
        waiting.append_token(7)
    started = engine.execute_pass(0.0)
    assert started is not None and started.end_ms == 0.0
    out = engine.complete_pass(started.pass_id, 0.0).by_rank[0].effects.outputs
    assert (out.completed, out.rejected, out.token_request_ids) == ([1], [1], [])
    assert engine.is_drained()
