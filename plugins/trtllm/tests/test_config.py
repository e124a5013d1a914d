"""Registration, the ``engine.trtllm:`` section and its validation."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from servesim.config.engine import EngineConfig
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim.factory import EngineFactory
from servesim.rank import RankIdentity
from servesim.timing.builtin import FixedTiming
from servesim_trtllm import plugin
from servesim_trtllm.config import (
    CapacitySchedulerPolicy,
    ContextChunkingPolicy,
    TrtllmConfig,
    effective_limits,
)
from servesim_trtllm.rank import TrtllmRank


def test_plugin_registers_trtllm(plugin_manager: Any, plugins: Any) -> None:
    plugin_manager.register(plugin)
    assert plugins.backends().get("trtllm") is TrtllmRank
    assert TrtllmRank.config_class is TrtllmConfig
    assert TrtllmRank.default_block_size == 32


def test_plugin_module_imports_no_machinery() -> None:
    code = (
        "import sys, servesim_trtllm.plugin, servesim_trtllm;"
        "print(sorted(m for m in sys.modules if m.startswith('servesim_trtllm.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['servesim_trtllm.plugin']"


def test_defaults_and_block_size_resolution() -> None:
    trt = TrtllmConfig()
    assert trt.capacity_scheduler_policy is CapacitySchedulerPolicy.GUARANTEED_NO_EVICT
    assert trt.context_chunking_policy is ContextChunkingPolicy.FIRST_COME_FIRST_SERVED
    assert trt.first_token_decode_call is False
    factory = EngineFactory(EngineConfig(backend="trtllm"), TrtllmRank, FixedTiming())
    assert factory.config.block_size == 32
    assert factory.backend_config == TrtllmConfig()


def test_limits_fall_back_to_engine_names() -> None:
    engine = EngineConfig(max_num_seqs=7, max_num_batched_tokens=300, enable_chunked_prefill=False)
    limits = effective_limits(engine, TrtllmConfig())
    assert (limits.max_batch_size, limits.max_num_tokens, limits.chunked_context) == (7, 300, False)
    own = effective_limits(engine, TrtllmConfig(max_batch_size=3, max_num_tokens=64))
    assert (own.max_batch_size, own.max_num_tokens) == (3, 64)
    unbounded = effective_limits(EngineConfig(max_num_seqs=None, max_num_batched_tokens=None), TrtllmConfig())
    assert (unbounded.max_batch_size, unbounded.max_num_tokens) == (None, None)


def test_yaml_section_structures_policy_by_name() -> None:
    loaded = load_config(
        None,
        [
            "engine.backend=trtllm",
            "engine.trtllm.capacity_scheduler_policy=static_batch",
            "engine.trtllm.max_num_tokens=512",
            "engine.trtllm.context_chunking_policy=equal_progress",
        ],
    )
    assert loaded.rank_class is TrtllmRank
    assert loaded.backend_config == TrtllmConfig(
        capacity_scheduler_policy=CapacitySchedulerPolicy.STATIC_BATCH,
        max_num_tokens=512,
        context_chunking_policy=ContextChunkingPolicy.EQUAL_PROGRESS,
    )


@pytest.mark.parametrize(
    ("sets", "path"),
    [
        (["engine.trtllm.capacity_scheduler_policy=fifo"], "engine.trtllm.capacity_scheduler_policy"),
        (["engine.trtllm.max_batch_size=0"], "engine.trtllm.max_batch_size"),
        (["engine.trtllm.max_num_tokens=-5"], "engine.trtllm.max_num_tokens"),
        (["engine.trtllm.bogus=1"], "engine.trtllm.bogus"),
        (["engine.worker_type=midway"], "engine.worker_type"),
        (["engine.aic_nextn=2", "engine.trtllm.capacity_scheduler_policy=max_utilization"],
         "engine.aic_nextn"),
        (["engine.native_host_offload={num_host_blocks: 4}"], "engine.native_host_offload"),
        (["engine.scheduling_policy=priority"], "engine.scheduling_policy: priority is modelled for "
                                                 "the vllm backend only"),
        (
            ["engine.trtllm.capacity_scheduler_policy=max_utilization", "engine.trtllm.max_num_tokens=16"],
            "engine.trtllm.max_num_tokens",
        ),
    ],
)
def test_bad_config_names_the_key(sets: list[str], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["engine.backend=trtllm", *sets])
    assert path in str(err.value)


def test_rank_refuses_invalid_config_directly() -> None:
    factory = EngineFactory(
        EngineConfig(backend="trtllm"),
        TrtllmRank,
        FixedTiming(),
        backend_config=TrtllmConfig(max_batch_size=0),
    )
    with pytest.raises(ConfigError, match=r"engine\.trtllm\.max_batch_size"):
        factory.build_rank(RankIdentity(0, 0, 1))
