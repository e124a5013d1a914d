"""Property test: random small workloads under every policy keep the rank's promises.

* every request ends exactly once; an accepted one emits exactly its normalised output
  (``min(max_output, capacity − prompt)``), a rejected one nothing; rejection happens exactly
  for prompts ≥ capacity or, without chunked context, longer than the step budget;
* no step schedules more than ``max_batch_size`` requests or ``max_num_tokens`` tokens,
  except a lone context without chunking (a resumed one may exceed the budget);
* only MAX_UTILIZATION pauses; the pool is empty once drained; runs are deterministic;
* after every step the rank's incremental bookkeeping matches a recomputation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.contract import Request
from servesim.engine import Engine
from servesim.testing.driver import drive
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]
BS = 4


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 8))
    reqs = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 1.0, 3.0, 7.0, 15.0]))
        shared = draw(st.integers(0, 3)) * BS
        own = draw(st.integers(1, 30))
        prompt = list(range(shared)) + [1000 * (i + 1) + k for k in range(own)]
        reqs.append((t, prompt, draw(st.integers(1, 16))))
    return {
        "policy": draw(st.sampled_from(["guaranteed_no_evict", "max_utilization", "static_batch"])),
        "num_gpu_blocks": draw(st.integers(4, 20)),
        "max_num_tokens": draw(st.integers(BS, 48)),
        "max_batch_size": draw(st.integers(1, 5)),
        "chunked": draw(st.booleans()),
        "caching": draw(st.booleans()),
        "reqs": reqs,
    }


def _run(make_engine: MakeEngine, sc: dict[str, Any]) -> Any:
    engine = make_engine(
        sc["policy"],
        block_size=BS,
        num_gpu_blocks=sc["num_gpu_blocks"],
        enable_chunked_prefill=sc["chunked"],
        enable_prefix_caching=sc["caching"],
        record=True,
        trt={"max_num_tokens": sc["max_num_tokens"], "max_batch_size": sc["max_batch_size"]},
    )
    rank = engine.ranks[0]
    execute = rank.execute_pass

    def checked(now_ms: float) -> Any:
        rp = execute(now_ms)
        rank.core.check_invariants()  # incremental reservations, queues, allocation bounds
        return rp

    rank.execute_pass = checked  # type: ignore[method-assign]
    arrivals = [(t, Request(i, Tokens(p), out)) for i, (t, p, out) in enumerate(sc["reqs"])]
    return drive(engine, arrivals, max_passes=20_000), rank.core


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(sc=scenarios())
def test_invariants(make_engine: MakeEngine, sc: dict[str, Any]) -> None:
    result, core = _run(make_engine, sc)
    capacity = sc["num_gpu_blocks"] * BS
    for i, (_, prompt, out) in enumerate(sc["reqs"]):
        trace = result.requests[i]
        too_long = not sc["chunked"] and len(prompt) > sc["max_num_tokens"]
        if len(prompt) >= capacity or too_long:
            assert trace.rejected and trace.token_times == []
        else:
            assert not trace.rejected
            assert len(trace.token_times) == min(out, capacity - len(prompt))
        assert trace.completed_ms is not None
    for done in result.completions:
        rec = done.by_rank[0].effects.schedule
        assert len(rec.scheduled) <= sc["max_batch_size"]
        if sc["chunked"] or len(rec.scheduled) > 1:
            assert sum(rec.scheduled.values()) <= sc["max_num_tokens"]
        assert 0 <= rec.free_blocks <= sc["num_gpu_blocks"]
    paused = sum(len(p.by_rank[0].effects.pressure_events) for p in result.passes)
    if sc["policy"] != "max_utilization":
        assert paused == 0
        assert core.allocation_failures == 0  # reservation to completion holds
    final = result.completions[-1].by_rank[0].effects.metrics
    assert final.active_blocks == 0 and final.running_requests == final.waiting_requests == 0
    again, _ = _run(make_engine, sc)
    assert {k: v.token_times for k, v in again.requests.items()} == {
        k: v.token_times for k, v in result.requests.items()
    }
