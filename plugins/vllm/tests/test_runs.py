"""Runs of passes (servesim.fast.runs) against the stepping path: identical in every observable.

Each example drives the same randomised workload twice through ``servesim.testing.drive`` —
once pass by pass, once letting the rank commit runs — and requires identical per-request
token times, completions and cached tokens, identical command effects, and, pass by pass
(runs expanded with :func:`servesim.fast.runs.expand`), identical outputs, KV events, metrics and
forward-pass metrics.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.contract import CancelRequest, PassCompletionEffects, Request
from servesim.fast.runs import expand
from servesim.testing.driver import DriveResult, drive
from servesim.timing import PolynomialTiming
from servesim.tokens import Tokens
from servesim_vllm.config import VllmConfig
from vllm_helpers import make_engine

CONFIGS = [
    dict(num_gpu_blocks=4096, block_size=16),
    dict(num_gpu_blocks=40, block_size=4),  # tight pool: preemptions and failed allocations
    dict(num_gpu_blocks=60, block_size=4, enable_prefix_caching=False),
    dict(num_gpu_blocks=64, block_size=2, enable_chunked_prefill=False, max_num_batched_tokens=64),
    dict(num_gpu_blocks=512, block_size=1, max_model_len=40),
    dict(num_gpu_blocks=100, block_size=8, max_num_seqs=3, emit_kv_token_ids=True),
    dict(num_gpu_blocks=200, block_size=4, max_num_batched_tokens=5),  # budget < batch
    # vLLM 0.33's local prefill cadence (runs decline: its step counters advance per pass)
    dict(num_gpu_blocks=200, block_size=4, max_num_batched_tokens=24, prefill_schedule_interval=2,
         backend_config=VllmConfig(profile="vllm-0.33")),
    dict(num_gpu_blocks=40, block_size=4, prefill_schedule_interval=4,
         backend_config=VllmConfig(local_prefill_cadence=True)),
]


@st.composite
def workloads(draw: Any) -> tuple[dict, list, list]:
    cfg = dict(draw(st.sampled_from(CONFIGS)))
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
    return cfg, arrivals, cancels


def _run(cfg: dict, arrivals: list, cancels: list, runs: bool,
         through: bool = False) -> DriveResult:
    engine = make_engine(PolynomialTiming(), emit_kv_events=True,
                         emit_forward_pass_metrics=True, **cfg)
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


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.booleans())
def test_runs_match_stepping(case: tuple[dict, list, list], through: bool) -> None:
    cfg, arrivals, cancels = case
    step = _run(cfg, arrivals, cancels, runs=False)
    run = _run(cfg, arrivals, cancels, runs=True, through=through)
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


def test_runs_cover_steady_decoding_in_few_calls() -> None:
    """Three requests decoding together: one stepped prefill pass, then runs that stop at
    each completion (the completing pass is a run's last pass) and at block allocations only
    when the pool could run short."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 10 + 5 * i))
                for i in range(3)]
    res = _run(dict(num_gpu_blocks=1000, block_size=4), arrivals, [], runs=True)
    assert len(res.passes) == 1  # the prefill
    assert [r.effects.completed for r in res.runs] == [[0], [1], [2]]
    assert [r.effects.num_passes for r in res.runs] == [9, 5, 5]
    assert [len(r.effects.members) for r in res.runs] == [3, 2, 1]
    # Every request's block-boundary KV events arrive inside the runs, at their pass.
    stored = [j for r in res.runs for j, evs in r.effects.kv_events.items() if evs]
    assert stored


def test_cancel_in_a_runs_last_pass_suppresses_only_that_pass() -> None:
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(5)]), 30)) for i in range(2)]
    # Decode passes are ~5.7 ms (polynomial floor); a cancel at 40 ms lands mid-run.
    cancels = [(40.0, 0, CancelRequest(1, discard_pending_output=True))]
    step = _run(dict(num_gpu_blocks=100, block_size=4), arrivals, cancels, runs=False)
    run = _run(dict(num_gpu_blocks=100, block_size=4), arrivals, cancels, runs=True)
    assert run.requests[1].token_times == step.requests[1].token_times
    assert run.requests[1].token_times[-1] < 40.0
    mid = [r for r in run.runs if r.effects.absent_last]
    assert [r.effects.absent_last for r in mid] == [[1]]


def test_long_runs_price_passes_in_numpy_chunks_identically() -> None:
    """Runs longer than the one-by-one pricing limit (numpy chunks), with a speed-up ratio
    that makes the nanosecond rounding bite, end exactly where stepping's passes end."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(37)]), 300 + 61 * i))
                for i in range(3)]
    arrivals.append((900.0, Request(9, Tokens(list(range(50))), 5)))
    cfg = dict(num_gpu_blocks=600, block_size=16, speedup_ratio=1.7, decode_speedup_ratio=1.3)
    step = _run(cfg, arrivals, [], runs=False)
    run = _run(cfg, arrivals, [], runs=True)
    assert max(r.effects.num_passes for r in run.runs) > 200
    for rid, trace in step.requests.items():
        assert trace.token_times == run.requests[rid].token_times
    a, b = _per_pass(step), _per_pass(run)
    assert all(_key(a[p]) == _key(b[p]) for p in a)


def test_zero_duration_decode_passes_end_a_run_each() -> None:
    """With a 0 ms decode every pass ends when it starts: a run stops after such a pass so
    the driver sees every boundary, and the result still matches stepping."""
    from servesim.timing import FixedTiming, FixedTimingConfig

    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(6)]), 7)) for i in range(2)]
    out = {}
    for runs in (False, True):
        engine = make_engine(FixedTiming(FixedTimingConfig(3.0, 0.0)), emit_kv_events=True,
                             num_gpu_blocks=50, block_size=4)
        out[runs] = drive(engine, arrivals, runs=runs)
    assert [r.effects.num_passes for r in out[True].runs] == [1] * len(out[True].runs)
    for rid in (0, 1):
        assert out[True].requests[rid].token_times == out[False].requests[rid].token_times
        assert out[True].requests[rid].token_times == [3.0] * 7


def test_runs_continue_while_the_queue_is_held_back() -> None:
    """Saturated: max_num_seqs admits two of five requests; the others wait, and the two
    decode in runs (admission is impossible until one completes), exactly as stepping."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(8)]), 20 + 3 * i))
                for i in range(5)]
    cfg = dict(num_gpu_blocks=400, block_size=4, max_num_seqs=2)
    step = _run(cfg, arrivals, [], runs=False)
    run = _run(cfg, arrivals, [], runs=True)
    assert {rid: t.token_times for rid, t in step.requests.items()} == {
        rid: t.token_times for rid, t in run.requests.items()}
    a, b = _per_pass(step), _per_pass(run)
    assert all(_key(a[p]) == _key(b[p]) for p in a)
    held = [r for r in run.runs if r.effects.pass_metrics[0].waiting_requests > 0]
    assert held and sum(r.effects.num_passes for r in held) > 30


def test_runs_continue_through_completions_when_nothing_waits() -> None:
    """With ``through_completions`` the three-request batch above decodes in one run: each
    request stops emitting at its own last pass, its blocks are released there, and every
    observable (tokens, KV events, metrics, FPMs) matches stepping pass by pass."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 10 + 5 * i))
                for i in range(3)]
    cfg = dict(num_gpu_blocks=1000, block_size=4)
    step = _run(cfg, arrivals, [], runs=False)
    run = _run(cfg, arrivals, [], runs=True, through=True)
    assert len(run.passes) == 1
    assert [r.effects.num_passes for r in run.runs] == [19]
    eff = run.runs[0].effects
    assert eff.completed_before == {8: [0], 13: [1]} and eff.completed == [2]
    assert [m.running_requests for m in eff.pass_metrics] == [3] * 8 + [2] * 5 + [1] * 5 + [0]
    assert [f.num_decode_requests for f in eff.forward_pass_metrics] == [3] * 9 + [2] * 5 + [1] * 5
    for rid, trace in step.requests.items():
        other = run.requests[rid]
        assert (trace.token_times, trace.completed_ms) == (other.token_times, other.completed_ms)
    a, b = _per_pass(step), _per_pass(run)
    assert sorted(a) == sorted(b)
    assert all(_key(a[p]) == _key(b[p]) for p in a)


def test_runs_stop_at_completions_while_requests_wait() -> None:
    """A held-back queue: a completion frees a slot, so the run must end with it even when
    the driver allows running through completions."""
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(8)]), 20 + 3 * i))
                for i in range(5)]
    cfg = dict(num_gpu_blocks=400, block_size=4, max_num_seqs=2)
    step = _run(cfg, arrivals, [], runs=False)
    run = _run(cfg, arrivals, [], runs=True, through=True)
    held = [r for r in run.runs if r.effects.pass_metrics[0].waiting_requests > 0]
    assert held and all(not r.effects.completed_before for r in held)
    a, b = _per_pass(step), _per_pass(run)
    assert all(_key(a[p]) == _key(b[p]) for p in a)


def test_consecutive_runs_reuse_the_batch_and_a_cancel_drops_it(monkeypatch: Any) -> None:
    """Runs split only by command times follow each other without a stepped pass: each
    takes the lengths the previous one left (``steady``) instead of re-reading the batch.
    A cancel in between changes the batch, so the cache is dropped and the next run reads
    the requests again; everything still matches stepping pass by pass."""
    from servesim_vllm.fast.steady import VllmSteadyBatch

    builds = []
    real = VllmSteadyBatch.build.__func__  # type: ignore[attr-defined]

    def spy(cls: Any, *args: Any) -> Any:
        builds.append(len(args[0]))
        return real(cls, *args)

    # Patched on the (interpreted) class, so a compiled build's runs module sees it too.
    monkeypatch.setattr(VllmSteadyBatch, "build", classmethod(spy))
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 60 + 4 * i))
                for i in range(4)]
    # Cancels of unknown ids are no-ops that still end a run; the one at 120 ms removes a
    # decoding member.
    cancels = [(at, 0, CancelRequest(rid)) for at, rid in
               ((50.0, 99), (90.0, 98), (120.0, 2), (160.0, 97))]
    cfg = dict(num_gpu_blocks=400, block_size=4)
    step = _run(cfg, arrivals, cancels, runs=False)
    run = _run(cfg, arrivals, cancels, runs=True)
    assert len(run.passes) == 1  # the prefill; then only runs
    # Four cancel times and three completions end the runs.
    assert [len(r.effects.members) for r in run.runs] == [4, 4, 4, 3, 3, 2, 1]
    # Built from the requests: the first run after the prefill, and the run after the real
    # cancel (3 members left); every other run (after a no-op cancel or a completion) reuses.
    assert builds == [4, 3]
    assert run.requests[2].token_times == step.requests[2].token_times
    for rid, trace in step.requests.items():
        assert trace.token_times == run.requests[rid].token_times, rid
    a, b = _per_pass(step), _per_pass(run)
    assert sorted(a) == sorted(b)
    assert all(_key(a[p]) == _key(b[p]) for p in a)


def test_passes_after_a_run_schedule_the_batch_from_the_cache(monkeypatch: Any) -> None:
    """A pass that admits an arrival into a steady batch schedules the members from the
    cache the previous run left (servesim_vllm.fast.steady) instead of stepping each one; the
    members' own counters stay stale until something else needs them. Three shapes of
    newcomer: a short prompt (joins the cache), a prompt longer than the token budget
    (still prefilling after the pass: the members are synced), and an arrival into a pool
    too tight for the members' next blocks (the cache is declined, stepping preempts).
    Every observable matches stepping pass by pass."""
    from servesim_vllm import scheduler as vsched
    from servesim_vllm.fast import steady

    taken: list[bool] = []
    kept: list[bool] = []
    real_step, real_after = steady.steady_step, steady.after_step

    def spy_step(s: Any) -> bool:
        taken.append(real_step(s))
        return taken[-1]

    def spy_after(s: Any) -> None:
        real_after(s)
        kept.append(s.steady is not None)

    # Compiled, the scheduler calls these natively (fast/steady.py is in its compilation group),
    # so the spies see nothing there; the comparison with stepping below still runs.
    spied = steady.__file__.endswith(".py")
    monkeypatch.setattr(vsched, "steady_step", spy_step)
    monkeypatch.setattr(vsched, "after_step", spy_after)
    arrivals = [(0.0, Request(i, Tokens([i * 1000 + t for t in range(9)]), 40 + 7 * i))
                for i in range(3)]
    arrivals += [(60.0, Request(3, Tokens([3000 + t for t in range(6)]), 30)),
                 (120.0, Request(4, Tokens([4000 + t for t in range(50)]), 20))]
    # Budget 24: request 3 (6 tokens) joins the cache; request 4 (50 tokens) is chunked.
    # 22 blocks of 4: after request 3 joins, the members' next blocks no longer fit.
    for cfg, expected in ((dict(num_gpu_blocks=400, block_size=4, max_num_batched_tokens=24),
                           [(True, True), (True, False)]),
                          (dict(num_gpu_blocks=22, block_size=4), [(True, True), (False, None)])):
        taken.clear()
        kept.clear()
        step = _run(cfg, arrivals, [], runs=False)
        assert not taken  # stepping alone never leaves a cache
        run = _run(cfg, arrivals, [], runs=True, through=True)
        if spied:
            assert list(zip(taken, [*kept, None], strict=False))[:2] == expected
        preempted = [p for c in run.passes for r in c.by_rank for p in r.effects.pressure_events]
        assert bool(preempted) == (expected[1][0] is False)
        for rid, trace in step.requests.items():
            assert trace.token_times == run.requests[rid].token_times, rid
        a, b = _per_pass(step), _per_pass(run)
        assert sorted(a) == sorted(b)
        assert all(_key(a[p]) == _key(b[p]) for p in a)
