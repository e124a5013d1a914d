"""Attention-DP: each rank owns its pool and KV event stream; idle siblings share the boundary."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from servesim.contract import Request, StoredBlocks, Submit
from servesim.engine import Engine
from servesim.testing.driver import drive
from servesim.tokens import Tokens

MakeEngine = Callable[..., Engine]


@pytest.mark.parametrize("policy", ["guaranteed_no_evict", "max_utilization", "static_batch"])
def test_two_ranks_run_independently(make_engine: MakeEngine, policy: str) -> None:
    engine = make_engine(policy, dp_size=2, block_size=4, kv_events=True)
    prompt = Tokens(range(8))
    reqs = [(0.0, Request(0, prompt, 3), 0), (0.0, Request(1, prompt, 1), 1)]
    result = drive(engine, reqs)
    assert result.requests[0].token_times == [10.0, 12.0, 14.0]
    assert result.requests[1].token_times == [10.0]  # same boundary as rank 0's pass
    stored = {
        rc.dp_rank: [e for e in rc.effects.kv_events if isinstance(e.data, StoredBlocks)]
        for done in result.completions[:1]
        for rc in done.by_rank
    }
    # Same prompt on both ranks: each rank publishes it, with its own dp_rank and ids from 0.
    assert [(e.dp_rank, e.event_id) for e in stored[0]] == [(0, 0)]
    assert [(e.dp_rank, e.event_id) for e in stored[1]] == [(1, 0)]
    # Rank 1 idles through rank 0's decodes but still reports metrics at each boundary.
    later = result.completions[1].by_rank
    assert [rc.dp_rank for rc in later] == [0, 1]
    assert later[1].effects.metrics.running_requests == 0
    assert later[1].effects.forward_pass_metrics.duration_ms == 2.0


def test_work_flags_describe_this_pass_only(make_engine: MakeEngine) -> None:
    engine = make_engine(dp_size=2, block_size=4)
    engine.apply(0, Submit(Request(0, Tokens(range(8)), 2)), 0.0)
    engine.apply(1, Submit(Request(1, Tokens(range(8)), 1)), 0.0)
    first = engine.execute_pass(0.0)
    assert first is not None
    assert [r.prefill_in_pass() for r in engine.ranks] == [True, True]
    engine.complete_pass(first.pass_id, first.end_ms)
    second = engine.execute_pass(first.end_ms)  # rank 0 decodes, rank 1 is drained and idle
    assert second is not None and [rp.dp_rank for rp in second.by_rank] == [0]
    assert [r.prefill_in_pass() for r in engine.ranks] == [False, False]
    assert [r.model_work_in_pass() for r in engine.ranks] == [True, False]
