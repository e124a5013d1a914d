"""The contract's conformance kit (``servesim.testing.conformance``) on every policy.

Each policy runs twice: with a roomy pool, and with a pool small enough that admission
waits (GNE, static batch) or running requests get paused (max utilization), so the
contract holds on the pressure paths too.
"""

from __future__ import annotations

import pytest
from servesim.config.engine import EngineConfig
from servesim.testing import ConformanceOptions, check_rank_conformance, engine_maker
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank

POLICIES = list(CapacitySchedulerPolicy)
OPTIONS = ConformanceOptions(num_requests=10, prompt_len=48, max_output_tokens=24)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("num_gpu_blocks", [16384, 9], ids=["roomy", "tight"])
def test_conformance(policy: CapacitySchedulerPolicy, num_gpu_blocks: int) -> None:
    config = EngineConfig(
        backend="trtllm", block_size=16, num_gpu_blocks=num_gpu_blocks, max_num_batched_tokens=64
    )
    make = engine_maker(
        TrtllmRank,
        config=config,
        backend_config=TrtllmConfig(capacity_scheduler_policy=policy),
    )
    report = check_rank_conformance(make, options=OPTIONS)
    assert report.ok
    assert len(report.checks) >= 9
