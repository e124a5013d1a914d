"""Runs of passes (servesim.fast.runs) of the sglang rank against its stepping path.

Each example drives the same randomised workload twice through ``servesim.testing.drive`` —
once pass by pass, once letting the rank commit runs — and requires identical per-request
token times, completions and cached tokens, identical command effects, and, pass by pass
(runs expanded with :func:`servesim.fast.runs.expand`), identical outputs, KV events, metrics and
forward-pass metrics; the radix cache's recency clock and books must agree too. Small pools
make requests retract (runs must stop before any pass that could), several page sizes, both
policies, and sinks on (stepped runs) and off (bulk runs) are drawn.
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
from servesim.timing.builtin import FixedTiming, FixedTimingConfig, PolynomialTiming
from servesim.tokens import Tokens
from servesim_sglang.config import SglangConfig
from servesim_sglang.rank import SglangRank

CONFIGS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (dict(num_gpu_blocks=4096, block_size=1), {}),
    (dict(num_gpu_blocks=120, block_size=1), dict(schedule_policy="lpm")),
    (dict(num_gpu_blocks=150, block_size=1, enable_prefix_caching=False), {}),
    (dict(num_gpu_blocks=70, block_size=1, max_num_seqs=4), dict(schedule_policy="lof")),
    (dict(num_gpu_blocks=400, block_size=1, max_num_seqs=2), {}),  # FCFS queue held back
    # a held-back head that the decaying new_token_ratio lets in mid-decode
    (dict(num_gpu_blocks=110, block_size=1), dict(schedule_conservativeness=1.4)),
    (dict(num_gpu_blocks=60, block_size=2), dict(schedule_conservativeness=1.4)),
    (dict(num_gpu_blocks=300, block_size=1, max_num_seqs=2), dict(schedule_policy="random")),
    (dict(num_gpu_blocks=90, block_size=1), {}),  # tight: retractions, evictions every pass
    (dict(num_gpu_blocks=40, block_size=4), dict(chunked_prefill_size=16, schedule_policy="lpm")),
    (dict(num_gpu_blocks=30, block_size=3), dict(chunked_prefill_size=12, schedule_policy="lof")),
    (dict(num_gpu_blocks=300, block_size=8, enable_prefix_caching=False), {}),
    (dict(num_gpu_blocks=200, block_size=2, max_num_seqs=3, emit_kv_token_ids=True), {}),
    (
        dict(num_gpu_blocks=60, block_size=2, speedup_ratio=1.7, decode_speedup_ratio=1.3),
        dict(schedule_policy="random"),
    ),
    # SGLang-version switches (servesim_sglang.behaviour): runs decline, so both drives step.
    (dict(num_gpu_blocks=40, block_size=4), dict(chunked_prefill_size=16, profile="sglang-0.5.23")),
    (dict(num_gpu_blocks=120), dict(profile="sglang-0.5.23", schedule_policy="lpm")),
    (dict(num_gpu_blocks=50, block_size=2), dict(chunked_prefill_size=-1, profile="sglang-0.5.23")),
    (dict(num_gpu_blocks=60, block_size=2), dict(lazy_decode_slot=True, evict_whole_leaves=True)),
    (dict(num_gpu_blocks=30, block_size=3), dict(chunked_prefill_size=12, sglang_retraction=True,
                                                  cache_decode_at_finish=True)),
    (dict(num_gpu_blocks=80), dict(chunked_prefill_size=-1)),
    # --enable-mixed-chunk (servesim_sglang.mixed): runs only while nothing waits
    (dict(num_gpu_blocks=110, block_size=1), dict(chunked_prefill_size=16, enable_mixed_chunk=True)),
    (dict(num_gpu_blocks=60, block_size=2, max_num_seqs=2), dict(chunked_prefill_size=8,
                                                                 enable_mixed_chunk=True)),
]


def make_engine(cfg: dict[str, Any], sg: dict[str, Any], sinks: bool, timing: Any = None) -> Engine:
    factory = EngineFactory(
        EngineConfig(backend="sglang", **cfg),
        SglangRank,
        timing if timing is not None else PolynomialTiming(),
        backend_config=SglangConfig(**sg),
        emit_kv_events=sinks,
        emit_forward_pass_metrics=sinks,
    )
    factory.engine_class = RunEngine
    return factory.build(0)


@st.composite
def workloads(draw: Any) -> tuple[dict, dict, tuple[bool, bool], list, list]:
    cfg, sg = draw(st.sampled_from(CONFIGS))
    sinks = draw(st.booleans())
    through = draw(st.booleans())
    n = draw(st.integers(1, 9))
    shared = [7_000_000 + i for i in range(draw(st.integers(0, 24)))]
    arrivals = []
    t = 0.0
    for rid in range(n):
        t += draw(st.sampled_from([0.0, 0.5, 3.0, 17.0, 40.0, 150.0]))
        own = draw(st.integers(1, 30))
        prefix = shared[: draw(st.integers(0, len(shared)))]
        prompt = prefix + [rid * 100_000 + i for i in range(own)]
        out = draw(st.integers(0, 60))
        ids = None
        if draw(st.integers(0, 5)) == 0:  # explicit output ids (some shorter than the output)
            ids = tuple(5_000 + (i % 3) for i in range(draw(st.integers(0, out + 1))))
        arrivals.append((t, Request(rid, Tokens(prompt), out, ids)))
    cancels = []
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.floats(0.0, t + 300.0, allow_nan=False))
        cancels.append(
            (at, 0, CancelRequest(draw(st.integers(0, n - 1)), discard_pending_output=draw(st.booleans())))
        )
    return cfg, sg, (sinks, through), arrivals, cancels


def _drive(engine: Engine, arrivals: list, cancels: list, runs: bool, through: bool = False) -> DriveResult:
    return drive(engine, arrivals, extra_commands=cancels, runs=runs, through_completions=through)


def _per_pass(result: DriveResult) -> dict[int, PassCompletionEffects]:
    out = {c.pass_id: c.by_rank[0].effects for c in result.completions}
    for run in result.runs:
        for j, eff in enumerate(expand(run.effects)):
            out[run.first_pass_id + j] = eff
    return out


def _key(eff: PassCompletionEffects) -> tuple:
    o = eff.outputs
    return (
        o.token_request_ids,
        o.completed,
        o.rejected,
        o.cached_tokens,
        eff.kv_events,
        eff.metrics,
        eff.forward_pass_metrics,
        eff.lifecycle_events,
    )


def _cache_state(engine: Engine) -> tuple:
    rank = engine.ranks[0]
    assert isinstance(rank, SglangRank)
    c = rank.cache
    nodes = []
    stack = [c.root]
    while stack:
        node = stack.pop()
        nodes.append((node.uid, tuple(node.key), node.lock, node.stamp))
        stack.extend(node.children.values())
    return (
        c.clock,
        c.free_pages,
        c.evictable_size,
        c.protected_size,
        sorted(nodes),
        rank.sched.ratio,
        rank.sched.retractions_total,
    )


def snapshot_after_passes(engine: Engine) -> dict[int, tuple]:
    """The radix cache's full state (keys, locks, recency stamps, clock, books) each time a
    pass or run is released, keyed by the passes executed so far: a run's snapshot must equal
    stepping's after the run's last pass."""
    rank = engine.ranks[0]
    assert isinstance(rank, SglangRank)
    snaps: dict[int, tuple] = {}
    complete_pass, complete_run = rank.complete_pass, rank.complete_run

    def on_pass(pending: Any, end_ms: float) -> Any:
        out = complete_pass(pending, end_ms)
        snaps[rank.counters.passes] = _cache_state(engine)
        return out

    def on_run(pending: Any, end_ms: float) -> Any:
        out = complete_run(pending, end_ms)
        snaps[rank.counters.passes] = _cache_state(engine)
        return out

    rank.complete_pass = on_pass  # type: ignore[method-assign]
    rank.complete_run = on_run  # type: ignore[method-assign]
    return snaps


def assert_same(step: DriveResult, run: DriveResult) -> None:
    assert step.end_ms == run.end_ms
    for rid, trace in step.requests.items():
        other = run.requests[rid]
        assert (trace.token_times, trace.completed_ms, trace.rejected, trace.cached_tokens) == (
            other.token_times,
            other.completed_ms,
            other.rejected,
            other.cached_tokens,
        ), rid
    assert step.command_effects == run.command_effects
    a, b = _per_pass(step), _per_pass(run)
    assert sorted(a) == sorted(b) == list(range(len(a)))
    for pid in a:
        assert _key(a[pid]) == _key(b[pid]), pid


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_runs_match_stepping(case: tuple[dict, dict, tuple[bool, bool], list, list]) -> None:
    cfg, sg, (sinks, through), arrivals, cancels = case
    e_step, e_run = make_engine(cfg, sg, sinks), make_engine(cfg, sg, sinks)
    snaps_step, snaps_run = snapshot_after_passes(e_step), snapshot_after_passes(e_run)
    step = _drive(e_step, arrivals, cancels, runs=False)
    run = _drive(e_run, arrivals, cancels, runs=True, through=through)
    assert_same(step, run)
    assert _cache_state(e_step) == _cache_state(e_run)
    assert snaps_run.keys() <= snaps_step.keys()
    for passes, state in snaps_run.items():
        assert state == snaps_step[passes], passes


def _uniform(n: int, prompt: int, out: int, gap: float = 0.0) -> list:
    return [
        (i * gap, Request(i, Tokens([i * 1000 + t for t in range(prompt)]), out + 5 * i)) for i in range(n)
    ]


def test_runs_cover_steady_decoding_and_end_at_completions() -> None:
    """Three requests prefilled together decode in runs that end with each completion."""
    arrivals = _uniform(3, 9, 10)
    for sinks in (False, True):
        e_run = make_engine(dict(num_gpu_blocks=1000, block_size=4), {}, sinks)
        res = _drive(e_run, arrivals, [], runs=True)
        assert len(res.passes) == 1  # the prefill
        assert [r.effects.completed for r in res.runs] == [[0], [1], [2]]
        assert [r.effects.num_passes for r in res.runs] == [9, 5, 5]
        assert [len(r.effects.members) for r in res.runs] == [3, 2, 1]
        step = _drive(
            make_engine(dict(num_gpu_blocks=1000, block_size=4), {}, sinks), arrivals, [], runs=False
        )
        assert_same(step, res)


def test_runs_stop_before_a_pass_that_could_retract() -> None:
    """A pool that fills while decoding: the pass that retracts is stepped, and the
    retraction happens exactly where stepping has it."""
    arrivals = [
        (i * 20.0, Request(i, Tokens([i * 1000 + t for t in range(12)]), 40 + 5 * i)) for i in range(6)
    ]
    cfg = dict(num_gpu_blocks=100, block_size=1)
    step = _drive(make_engine(cfg, {}, False), arrivals, [], runs=False)
    e_run = make_engine(cfg, {}, False)
    run = _drive(e_run, arrivals, [], runs=True)
    assert_same(step, run)
    rank = e_run.ranks[0]
    assert isinstance(rank, SglangRank)
    assert rank.sched.retractions_total == 1
    assert run.runs and max(r.effects.num_passes for r in run.runs) > 3


def test_zero_duration_decode_passes_end_a_run_each() -> None:
    arrivals = _uniform(2, 6, 7)
    out = {}
    for runs in (False, True):
        engine = make_engine(
            dict(num_gpu_blocks=50, block_size=1), {}, True, FixedTiming(FixedTimingConfig(3.0, 0.0))
        )
        out[runs] = _drive(engine, arrivals, [], runs=runs)
    assert [r.effects.num_passes for r in out[True].runs] == [1] * len(out[True].runs)
    assert_same(out[False], out[True])


def test_runs_continue_through_completions_when_nothing_waits() -> None:
    """Page size 1, with the driver taking completions mid-run: the three-request batch
    decodes in one run after its prefill, each completion at its own pass."""
    arrivals = _uniform(3, 9, 10)
    for sinks in (False, True):
        cfg = dict(num_gpu_blocks=1000, block_size=1)
        res = _drive(make_engine(cfg, {}, sinks), arrivals, [], runs=True, through=True)
        assert len(res.passes) == 1 and len(res.runs) == 1
        eff = res.runs[0].effects
        assert eff.num_passes == 19
        assert eff.completed_before == {8: [0], 13: [1]} and eff.completed == [2]
        assert [m.running_requests for m in eff.pass_metrics or []][7:10] == [3, 2, 2]
        step = _drive(make_engine(cfg, {}, sinks), arrivals, [], runs=False)
        assert_same(step, res)


PAGE1 = [c for c in CONFIGS if c[0].get("block_size") == 1]


@st.composite
def bursts(draw: Any) -> tuple[dict, dict, list, list]:
    """Page size 1, bursts of arrivals with long gaps: runs continue through completions."""
    cfg, sg = draw(st.sampled_from(PAGE1))
    n = draw(st.integers(2, 9))
    shared = [8_000_000 + i for i in range(draw(st.integers(0, 12)))]
    arrivals = []
    t = 0.0
    for rid in range(n):
        t += draw(st.sampled_from([0.0, 0.0, 1.0, 400.0]))
        prefix = shared[: draw(st.integers(0, len(shared)))]
        prompt = prefix + [rid * 100_000 + i for i in range(draw(st.integers(1, 20)))]
        ids = tuple(9_000 + i % 2 for i in range(70)) if draw(st.integers(0, 4)) == 0 else None
        arrivals.append((t, Request(rid, Tokens(prompt), draw(st.integers(1, 60)), ids)))
    cancels = []
    if draw(st.booleans()):
        at = draw(st.floats(0.0, t + 400.0, allow_nan=False))
        cancels.append((at, 0, CancelRequest(draw(st.integers(0, n - 1)), discard_pending_output=True)))
    return cfg, sg, arrivals, cancels


@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bursts())
def test_bulk_runs_through_completions_match_stepping(case: tuple[dict, dict, list, list]) -> None:
    cfg, sg, arrivals, cancels = case
    e_step, e_run = make_engine(cfg, sg, False), make_engine(cfg, sg, False)
    snaps_step, snaps_run = snapshot_after_passes(e_step), snapshot_after_passes(e_run)
    step = _drive(e_step, arrivals, cancels, runs=False)
    run = _drive(e_run, arrivals, cancels, runs=True, through=True)
    assert_same(step, run)
    for passes, state in snaps_run.items():
        assert state == snaps_step[passes], passes


def test_runs_continue_while_the_queue_is_held_back() -> None:
    """FCFS at max_num_seqs: two of five requests run, the others wait, and the two decode
    in runs (no slot opens until a completion, which ends the run), exactly as stepping."""
    arrivals = _uniform(5, 8, 20)
    for sinks in (False, True):
        cfg = dict(num_gpu_blocks=400, block_size=1, max_num_seqs=2)
        step = _drive(make_engine(cfg, {}, sinks), arrivals, [], runs=False)
        run = _drive(make_engine(cfg, {}, sinks), arrivals, [], runs=True, through=True)
        assert_same(step, run)
        held = [r for r in run.runs if (r.effects.pass_metrics or [])[0].waiting_requests > 0]
        assert held and sum(r.effects.num_passes for r in held) > 30
        assert all(not r.effects.completed_before for r in held)


def test_held_back_head_admitted_as_the_ratio_decays() -> None:
    """A head held back by the running batch's reservation: with conservativeness 2.0 the
    decaying ``new_token_ratio`` frees budget faster than decoding uses it, so stepping
    admits the head mid-decode; a run must stop before that pass (its per-pass check uses
    each pass's decayed ratio)."""
    shape = [(5.0, 12, 175), (10.0, 11, 58), (15.0, 17, 62), (45.0, 21, 126), (75.0, 39, 93)]
    arrivals = [
        (t, Request(i, Tokens([i * 1000 + k for k in range(n)]), out)) for i, (t, n, out) in enumerate(shape)
    ]
    cfg, sg = dict(num_gpu_blocks=300, block_size=1), dict(schedule_conservativeness=2.0)
    step = _drive(make_engine(cfg, sg, False), arrivals, [], runs=False)
    run = _drive(make_engine(cfg, sg, False), arrivals, [], runs=True)
    assert_same(step, run)
    held = [r for r in run.runs if (r.effects.pass_metrics or [])[0].waiting_requests > 0]
    assert held and not any(r.effects.completed for r in held[:1])
