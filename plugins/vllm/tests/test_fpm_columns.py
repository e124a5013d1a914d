"""The forward-pass metrics of runs and stepped passes, built without per-pass work
(servesim_vllm.fast.runs._fpms a segment at a time, the runs' shared FpmRun.base, and
VllmRank.fpm_tuple's inlined Welford) equal what the per-pass formulas give."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from servesim.contract import ForwardPassMetrics
from servesim.mechanics.numeric import Welford
from servesim_vllm import rank as vrank
from servesim_vllm.fast import runs as vruns
from servesim_vllm.rank import _FPM_ORDER, VllmRank
from vllm_helpers import make_engine

FIELDS = dict(worker_id=3, dp_rank=1, num_queued_prefill=0, sum_queued_prefill_tokens=0,
              var_queued_prefill_length=0.0, num_queued_decode=0, sum_queued_decode_kv_tokens=0,
              var_queued_decode_kv_tokens=0.0, num_prefill_requests=0, sum_prefill_tokens=0,
              var_prefill_length=0.0, sum_prefill_kv_tokens=0)


def _reference(run: Any, end_ms: float) -> list[ForwardPassMetrics]:
    """The per-pass loop: pass ``j`` takes the last segment starting at or before it."""
    out = []
    start = run.started_at_ms
    ends, segments = run.ends, run.segments
    seg = 0
    for j in range(len(ends)):
        while seg + 1 < len(segments) and segments[seg + 1][0] <= j:
            seg += 1
        _j0, total, sq, m = segments[seg]
        end = end_ms if j == len(ends) - 1 else ends[j]
        kv = total + j * m
        out.append(ForwardPassMetrics(
            **run.fpm_fields, counter_id=run.counter0 + j, num_decode_requests=m,
            sum_decode_kv_tokens=kv,
            var_decode_kv_tokens=vruns.pop_var(m, kv, sq + 2 * j * total + j * j * m),
            duration_ms=max(0.0, end - start)))
        start = ends[j]
    return out


@st.composite
def runs(draw: st.DrawFn) -> tuple[Any, float]:
    k = draw(st.integers(1, 12))
    start = draw(st.floats(0, 1e6))
    steps = draw(st.lists(st.one_of(st.just(0.0), st.floats(0, 50)), min_size=k, max_size=k))
    ends = []
    t = start
    for s in steps:
        t += s
        ends.append(t)
    # Completions split the run: segments start at increasing passes, the first at 0.
    starts = sorted(set(draw(st.lists(st.integers(1, k + 2), max_size=4))))
    segments = []
    for j0 in [0, *starts]:
        m = draw(st.integers(0, 300))
        lengths = draw(st.lists(st.integers(1, 20000), min_size=m, max_size=m))
        segments.append((j0, sum(lengths), sum(x * x for x in lengths), m))
    segments = [seg for seg in segments if seg[0] < k]
    end_ms = ends[-1] + draw(st.sampled_from([0.0, -1.0, 2.5]))
    run = vruns.VllmRunPending(start)
    run.fpm_fields, run.ends, run.segments = dict(FIELDS), ends, segments
    run.counter0 = draw(st.integers(0, 10**6))
    return run, end_ms


@given(r=runs())
def test_run_columns_equal_the_per_pass_metrics(r: tuple[Any, float]) -> None:
    run, end_ms = r
    built = vruns.fpms(run, end_ms)
    expected = _reference(run, end_ms)
    assert list(built) == expected
    # Same values and types, text for text (0.0 against -0.0, ints against floats).
    for col, name in ((built.durations, "duration_ms"), (built.var_decode, "var_decode_kv_tokens"),
                      (built.sum_decode_kv, "sum_decode_kv_tokens"),
                      (built.num_decode, "num_decode_requests")):
        assert list(map(repr, col)) == [repr(getattr(m, name)) for m in expected]


def test_runs_of_a_rank_share_their_base_while_the_queues_hold() -> None:
    rank = make_engine(num_gpu_blocks=64, block_size=4, emit_forward_pass_metrics=True).ranks[0]
    assert isinstance(rank, VllmRank)
    first = vruns.run_fpm_base(rank, [0, 0, 0], [0, 0, 0])
    assert first == dict(FIELDS, worker_id=rank.identity.worker_id, dp_rank=rank.identity.dp_rank)
    assert vruns.run_fpm_base(rank, [0, 0, 0], [0, 0, 0]) is first
    other = vruns.run_fpm_base(rank, [2, 10, 58], [0, 0, 0])
    assert other is not first and first["num_queued_prefill"] == 0  # the shared one stays
    assert other == dict(first, num_queued_prefill=2, sum_queued_prefill_tokens=10,
                         var_queued_prefill_length=vruns.pop_var(2, 10, 58))


@pytest.mark.skipif(vrank.__file__.endswith((".so", ".pyd")),
                    reason="calls the method on a stand-in rank: the compiled class takes only its own")
@given(lengths=st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 40000),
                                  st.integers(0, 3000), st.integers(0, 3000)), max_size=12))
def test_a_stepped_pass_metrics_are_welford_s(lengths: list[tuple[int, int, int, int]]) -> None:
    """``fpm_tuple`` inlines :class:`Welford` for the prefill lengths: the same floats."""
    work = {i: SimpleNamespace(prompt_tokens=p, req=SimpleNamespace(prompt_len=plen), tokens=t,
                               prefix_tokens=pre)
            for i, (p, plen, t, pre) in enumerate(lengths)}
    res = SimpleNamespace(work=work, decode_stats=(3, 30, 320))
    rank = SimpleNamespace(identity=SimpleNamespace(worker_id=2, dp_rank=0), pass_counter=7,
                           sched=SimpleNamespace(queued_prefill=[2, 9, 45], queued_decode=[1, 4, 16]),
                           book=SimpleNamespace(dests=None))
    fields = VllmRank.fpm_tuple(rank, res)  # type: ignore[arg-type]
    pre = Welford()
    for w in work.values():
        if w.prompt_tokens > 0:
            pre.add(w.req.prompt_len)
    prefills = [w for w in work.values() if w.prompt_tokens > 0]
    expected = ForwardPassMetrics(
        worker_id=2, dp_rank=0, counter_id=7, num_prefill_requests=pre.n,
        sum_prefill_tokens=sum(w.tokens for w in prefills), var_prefill_length=pre.variance(),
        sum_prefill_kv_tokens=sum(w.prefix_tokens for w in prefills), num_decode_requests=3,
        sum_decode_kv_tokens=30, var_decode_kv_tokens=vruns.pop_var(3, 30, 320),
        num_queued_prefill=2, sum_queued_prefill_tokens=9,
        var_queued_prefill_length=vruns.pop_var(2, 9, 45), num_queued_decode=1,
        sum_queued_decode_kv_tokens=4, var_queued_decode_kv_tokens=0.0, duration_ms=1.5)
    got = ForwardPassMetrics(*fields, 1.5)
    assert got == expected
    assert [repr(getattr(got, f)) for f in _FPM_ORDER] == [repr(getattr(expected, f)) for f in _FPM_ORDER]
