"""Runs of passes (servesim_trtllm.fast.runs) against the stepping path: identical in every
observable.

Each example drives the same randomised workload twice through ``servesim.testing.drive`` —
once pass by pass, once letting the rank commit runs — under every capacity policy, with
tight and roomy pools, chunked context on and off, prefix caching on and off, KV events and
forward-pass metrics on, and requires identical per-request token times, completions and
cached tokens, identical command effects, and, pass by pass (runs expanded with
:func:`servesim.fast.runs.expand`), identical outputs, KV events, metrics and forward-pass metrics.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.contract import CancelRequest, PassCompletionEffects, Request
from servesim.engine import Engine
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.runs import expand
from servesim.testing.driver import DriveResult, drive
from servesim.timing import FixedTiming, FixedTimingConfig, PolynomialTiming
from servesim.tokens import Tokens
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank

POLICIES = ["guaranteed_no_evict", "max_utilization", "static_batch"]
CONFIGS = [
    dict(num_gpu_blocks=4096, block_size=16),
    dict(num_gpu_blocks=40, block_size=4),  # tight: held-back queue heads, pauses
    dict(num_gpu_blocks=24, block_size=4, max_num_seqs=3),
    dict(num_gpu_blocks=60, block_size=4, enable_prefix_caching=False),
    dict(num_gpu_blocks=64, block_size=2, enable_chunked_prefill=False, max_num_batched_tokens=64),
    dict(num_gpu_blocks=512, block_size=1, max_model_len=40),
    dict(num_gpu_blocks=100, block_size=8, max_num_seqs=3, emit_kv_token_ids=True),
    dict(num_gpu_blocks=200, block_size=4, max_num_batched_tokens=5),  # budget < batch
]


def make_engine(policy: str, timing: Any = None, **keys: Any) -> Engine:
    config = EngineConfig(backend="trtllm", **keys)
    trt = TrtllmConfig(capacity_scheduler_policy=CapacitySchedulerPolicy(policy))
    factory = EngineFactory(config, TrtllmRank, timing or PolynomialTiming(), backend_config=trt,
                            emit_kv_events=True, emit_forward_pass_metrics=True)
    factory.engine_class = RunEngine
    return factory.build(0)


@st.composite
def workloads(draw: Any) -> tuple[str, dict, list, list]:
    policy = draw(st.sampled_from(POLICIES))
    cfg = dict(draw(st.sampled_from(CONFIGS)))
    if policy != "guaranteed_no_evict" and cfg.get("max_num_batched_tokens", 8192) < cfg["block_size"]:
        cfg["max_num_batched_tokens"] = cfg["block_size"] * 2
    n = draw(st.integers(1, 10))
    shared = [7_000_000 + i for i in range(draw(st.integers(0, 24)))]
    arrivals = []
    t = 0.0
    for rid in range(n):
        t += draw(st.sampled_from([0.0, 0.5, 3.0, 17.0, 40.0]))
        own = draw(st.integers(1, 30))
        prefix = shared[: draw(st.integers(0, len(shared)))]
        prompt = prefix + [rid * 100_000 + i for i in range(own)]
        out = draw(st.integers(0, 45))
        arrivals.append((t, Request(rid, Tokens(prompt), out)))
    cancels = []
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.floats(0.0, t + 200.0, allow_nan=False))
        cancels.append((at, 0, CancelRequest(draw(st.integers(0, n - 1)),
                                             discard_pending_output=draw(st.booleans()))))
    return policy, cfg, arrivals, cancels


def _run(policy: str, cfg: dict, arrivals: list, cancels: list, runs: bool,
         timing: Any = None, through: bool = False) -> DriveResult:
    engine = make_engine(policy, timing, **cfg)
    return drive(engine, arrivals, extra_commands=cancels, runs=runs, through_completions=through)


def _per_pass(result: DriveResult) -> dict[int, PassCompletionEffects]:
    out = {c.pass_id: c.by_rank[0].effects for c in result.completions}
    for run in result.runs:
        for j, eff in enumerate(expand(run.effects)):
            out[run.first_pass_id + j] = eff
    return out


def _key(eff: PassCompletionEffects) -> tuple:
    o = eff.outputs
    return (o.token_request_ids, o.completed, o.rejected, o.cached_tokens, eff.kv_events,
            eff.metrics, eff.forward_pass_metrics, eff.lifecycle_events)


def _assert_same(step: DriveResult, run: DriveResult) -> None:
    assert step.end_ms == run.end_ms
    for rid, trace in step.requests.items():
        other = run.requests[rid]
        assert (trace.token_times, trace.completed_ms, trace.rejected, trace.cached_tokens) == (
            other.token_times, other.completed_ms, other.rejected, other.cached_tokens), rid
    assert step.command_effects == run.command_effects
    a, b = _per_pass(step), _per_pass(run)
    assert sorted(a) == sorted(b) == list(range(len(a)))
    for pid in a:
        assert _key(a[pid]) == _key(b[pid]), pid


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.booleans())
def test_runs_match_stepping(case: tuple[str, dict, list, list], through: bool) -> None:
    """``through``: runs may continue through completions (the driver retires them mid-run)."""
    policy, cfg, arrivals, cancels = case
    step = _run(policy, cfg, arrivals, cancels, runs=False)
    run = _run(policy, cfg, arrivals, cancels, runs=True, through=through)
    _assert_same(step, run)


def test_runs_continue_through_completions() -> None:
    """Nothing waits: one run carries the batch through every completion (each request
    completes at its own pass inside the run, reported in ``completed_before``); static
    batch does the same while a queue waits for the batch to drain."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 10 + 5 * i))
                for i in range(3)]
    cfg = dict(num_gpu_blocks=1000, block_size=4)
    for policy in POLICIES:
        step = _run(policy, cfg, arrivals, [], runs=False)
        run = _run(policy, cfg, arrivals, [], runs=True, through=True)
        _assert_same(step, run)
        assert [r.effects.num_passes for r in run.runs] == [19]
        assert run.runs[0].effects.completed_before == {8: [0], 13: [1]}
        assert run.runs[0].effects.completed == [2]
    queued = arrivals + [(1.0, Request(7, Tokens(list(range(5))), 3))]
    step = _run("static_batch", dict(cfg, max_num_seqs=3), queued, [], runs=False)
    run = _run("static_batch", dict(cfg, max_num_seqs=3), queued, [], runs=True, through=True)
    _assert_same(step, run)
    assert run.runs[0].effects.completed_before == {8: [0], 13: [1]}


def test_runs_cover_steady_decoding_in_few_calls() -> None:
    """Three requests decoding together (GNE): one stepped context pass, then runs that stop
    at each completion; block boundaries inside runs publish their KV events at their pass."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 10 + 5 * i))
                for i in range(3)]
    res = _run("guaranteed_no_evict", dict(num_gpu_blocks=1000, block_size=4), arrivals, [],
               runs=True)
    assert len(res.passes) == 1  # the context pass
    assert [r.effects.completed for r in res.runs] == [[0], [1], [2]]
    assert [r.effects.num_passes for r in res.runs] == [9, 5, 5]
    assert [len(r.effects.members) for r in res.runs] == [3, 2, 1]
    stored = [j for r in res.runs for j, evs in r.effects.kv_events.items() if evs]
    assert stored


def test_gne_runs_while_the_queue_head_is_held_back() -> None:
    """GNE reserves to completion: with room for two requests the third waits; the two
    decode in runs (the head stays blocked), exactly as stepping."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(8)]), 20 + 3 * i))
                for i in range(4)]
    cfg = dict(num_gpu_blocks=16, block_size=4)
    step = _run("guaranteed_no_evict", cfg, arrivals, [], runs=False)
    run = _run("guaranteed_no_evict", cfg, arrivals, [], runs=True)
    _assert_same(step, run)
    held = [r for r in run.runs if r.effects.pass_metrics[0].waiting_requests > 0]
    assert held and sum(r.effects.num_passes for r in held) > 20


def test_static_batch_runs_with_a_queue() -> None:
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(6)]), 12 + 4 * i))
                for i in range(5)]
    cfg = dict(num_gpu_blocks=300, block_size=4, max_num_seqs=2)
    step = _run("static_batch", cfg, arrivals, [], runs=False)
    run = _run("static_batch", cfg, arrivals, [], runs=True)
    _assert_same(step, run)
    assert any(r.effects.pass_metrics[0].waiting_requests > 0 for r in run.runs)


def test_head_reusing_a_block_finalised_in_a_run_ends_it() -> None:
    """Request 1's prompt is request 0's prompt plus its planned outputs: once request 0
    finalises that block the held-back head can reuse it, so the run must end there and
    stepping decides admission; runs and stepping agree."""
    out0 = [900 + i for i in range(12)]
    arrivals = [
        (0.0, Request(0, Tokens(list(range(8))), 12, output_token_ids=tuple(out0))),
        (1.0, Request(1, Tokens(list(range(8)) + out0[:8]), 4)),
    ]
    cfg = dict(num_gpu_blocks=7, block_size=4)
    step = _run("guaranteed_no_evict", cfg, arrivals, [], runs=False)
    run = _run("guaranteed_no_evict", cfg, arrivals, [], runs=True)
    _assert_same(step, run)


def test_long_runs_price_passes_in_numpy_chunks_identically() -> None:
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(37)]), 300 + 61 * i))
                for i in range(3)]
    arrivals.append((900.0, Request(9, Tokens(list(range(50))), 5)))
    cfg = dict(num_gpu_blocks=600, block_size=16, speedup_ratio=1.7, decode_speedup_ratio=1.3)
    for policy in POLICIES:
        step = _run(policy, cfg, arrivals, [], runs=False)
        run = _run(policy, cfg, arrivals, [], runs=True)
        assert max(r.effects.num_passes for r in run.runs) > 200
        _assert_same(step, run)


def test_zero_duration_decode_passes_end_a_run_each() -> None:
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(6)]), 7)) for i in range(2)]
    timing = FixedTiming(FixedTimingConfig(3.0, 0.0))
    cfg = dict(num_gpu_blocks=50, block_size=4)
    step = _run("guaranteed_no_evict", cfg, arrivals, [], runs=False, timing=timing)
    run = _run("guaranteed_no_evict", cfg, arrivals, [], runs=True, timing=timing)
    assert [r.effects.num_passes for r in run.runs] == [1] * len(run.runs)
    _assert_same(step, run)
    assert run.requests[0].token_times == [3.0] * 7


def test_max_utilization_runs_keep_the_active_list_order() -> None:
    """Requests 1 and 4 share their first block: ``beneficialToSkip`` holds 4 back a step, so
    5 is admitted first, yet max_utilization schedules the active list in submission order
    (4 before 5). A run must emit in that order too (it emitted 5 before 4 before the fix)."""
    shared = [7_000_000 + i for i in range(16)]

    def req(rid: int, prefix: int, own: int, out: int) -> tuple[float, Request]:
        return 0.0, Request(rid, Tokens(shared[:prefix] + [rid * 100_000 + i for i in range(own)]),
                            out)

    arrivals = [req(0, 0, 1, 0), req(1, 16, 1, 0), req(2, 0, 1, 0), req(3, 0, 1, 0),
                req(4, 16, 1, 2), req(5, 0, 1, 3)]
    cfg = dict(num_gpu_blocks=4096, block_size=16)
    step = _run("max_utilization", cfg, arrivals, [], runs=False)
    run = _run("max_utilization", cfg, arrivals, [], runs=True)
    assert run.runs and [r.effects.members for r in run.runs][0] == [4, 5]
    _assert_same(step, run)


def test_steps_after_a_run_schedule_the_batch_from_the_cache(monkeypatch: Any) -> None:
    """A guaranteed-no-evict step that admits an arrival into a steady batch schedules the
    members from the batch a run left (servesim_trtllm.fast.steady); their own counters stay
    stale. A short prompt joins the batch; a prompt longer than the token budget is still
    in context after its step, so the members are written back and the batch dropped. Every
    observable matches stepping pass by pass, and the invariant check (which syncs first)
    holds after each pass."""
    from servesim_trtllm import rank as trank
    from servesim_trtllm.fast import steady

    taken: list[int | None] = []
    kept: list[bool] = []
    real_step, real_after = steady.steady_step, steady.after_step

    def spy_step(core: Any, budget: float) -> int | None:
        taken.append(real_step(core, budget))
        return taken[-1]

    def spy_after(core: Any, work: Any) -> None:
        real_after(core, work)
        kept.append(core.steady is not None)
        core.check_invariants()

    # Compiled, the rank calls these natively (fast/steady.py is in its compilation group), so
    # the spies see nothing there; the comparison with stepping below still runs.
    spied = steady.__file__.endswith(".py")
    monkeypatch.setattr(trank, "steady_step", spy_step)
    monkeypatch.setattr(trank, "after_step", spy_after)
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 40 + 7 * i))
                for i in range(3)]
    arrivals += [(60.0, Request(3, Tokens([3000 + t for t in range(6)]), 30)),
                 (120.0, Request(4, Tokens([4000 + t for t in range(50)]), 20))]
    cfg = dict(num_gpu_blocks=400, block_size=4, max_num_batched_tokens=24)
    step = _run("guaranteed_no_evict", cfg, arrivals, [], runs=False)
    assert not taken  # stepping alone never leaves a batch
    run = _run("guaranteed_no_evict", cfg, arrivals, [], runs=True, through=True)
    if spied:
        assert taken[:2] == [3, 4] and kept[:2] == [True, False]
    _assert_same(step, run)
