"""EventReaders.occupancy (servesim.fast.event_readers): ranks skip the occupancy snapshots
nobody reads (the replay turns them off), and nothing else changes."""

from __future__ import annotations

import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request, Submit
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.event_readers import EventReaders, hand_readers
from servesim.timing import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_trtllm.rank import TrtllmRank
from servesim_vllm.rank import VllmRank


def _drive(rank_class: type, record: bool) -> list:
    factory = EngineFactory(EngineConfig(num_gpu_blocks=64, block_size=4), rank_class,
                            FixedTiming(FixedTimingConfig(10.0, 2.0)))
    hand_readers(factory, EventReaders(occupancy=record))
    engine = factory.build(0)
    seen = [engine.apply(0, Submit(Request(1, Tokens(list(range(10))), 3)), 0.0).metrics]
    now = 0.0
    tokens = []
    while engine.is_ready():
        started = engine.execute_pass(now)
        assert started is not None
        now = started.end_ms
        done = engine.complete_pass(started.pass_id, now)
        for rc in done.by_rank:
            seen.append(rc.effects.metrics)
            tokens.append((now, list(rc.effects.outputs.token_request_ids)))
    return [seen, tokens]


@pytest.mark.parametrize("rank_class", [VllmRank, TrtllmRank])
def test_metrics_are_left_out_only_when_asked(rank_class: type) -> None:
    on_seen, on_tokens = _drive(rank_class, True)
    off_seen, off_tokens = _drive(rank_class, False)
    assert off_tokens == on_tokens and len(on_tokens) == 3  # three tokens, same times
    assert all(m is None for m in off_seen)
    assert on_seen[0].waiting_requests == 1 and on_seen[-1].running_requests == 0


@pytest.mark.parametrize("rank_class", [VllmRank, TrtllmRank])
@pytest.mark.parametrize("record", [True, False])
def test_runs_follow_the_switch_too(rank_class: type, record: bool) -> None:
    factory = EngineFactory(EngineConfig(num_gpu_blocks=64, block_size=4), rank_class,
                            FixedTiming(FixedTimingConfig(10.0, 2.0)))
    hand_readers(factory, EventReaders(occupancy=record))
    factory.engine_class = RunEngine
    engine = factory.build(0)
    engine.apply(0, Submit(Request(1, Tokens(list(range(10))), 12)), 0.0)
    now = 0.0
    run = None
    while run is None:
        run = engine.execute_run(now, float("inf"))
        if run is None:
            started = engine.execute_pass(now)
            assert started is not None
            now = started.end_ms
            engine.complete_pass(started.pass_id, now)
    done = engine.complete_run(run.first_pass_id, run.end_ms).effects
    assert done.num_passes == run.num_passes > 1
    if record:
        assert [m.running_requests for m in done.pass_metrics] == [1] * (done.num_passes - 1) + [0]
    else:
        assert done.pass_metrics is None and done.metrics is None
