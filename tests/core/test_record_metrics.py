"""RankServices.record_metrics: ranks skip the occupancy snapshots nobody reads (the replay
turns them off), and nothing else changes."""

from __future__ import annotations

import attrs
import pytest
from servesim.config.engine import EngineConfig
from servesim.contract import Request, Submit
from servesim.factory import EngineFactory
from servesim.timing import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_trtllm.rank import TrtllmRank
from servesim_vllm.rank import VllmRank


def _drive(rank_class: type, record: bool) -> list:
    factory = EngineFactory(EngineConfig(num_gpu_blocks=64, block_size=4), rank_class,
                            FixedTiming(FixedTimingConfig(10.0, 2.0)))
    factory.services = attrs.evolve(factory.services, record_metrics=record)
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
