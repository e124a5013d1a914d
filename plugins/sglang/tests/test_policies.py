"""Schedule policies: the built-ins and a third-party policy selected through the hook."""

from __future__ import annotations

from typing import Any

import pytest
from servesim import hookimpl
from servesim.config.engine import EngineConfig
from servesim.contract import Request
from servesim.engine import Engine
from servesim.errors import EngineError, PluginError
from servesim.factory import EngineFactory
from servesim.plugins import Plugins, make_plugin_manager
from servesim.testing.driver import drive
from servesim.timing.builtin import FixedTiming, FixedTimingConfig
from servesim.tokens import Tokens
from servesim_sglang import plugin as sglang_plugin
from servesim_sglang.config import SglangConfig
from servesim_sglang.policies import LofPolicy, LpmPolicy, RandomPolicy, SchedulePolicy
from servesim_sglang.rank import SglangRank
from servesim_sglang.request import SglangRequest


class FakeContext:
    page_size = 1
    lpm_fallback_threshold = 128
    check_threshold = 32
    deprioritize_threshold = 32

    def __init__(self, hits: dict[int, int]) -> None:
        self.hits = hits

    def prefix_match_len(self, request: SglangRequest) -> int:
        return self.hits.get(request.rid, 0)


def sreq(rid: int, tokens: list[int], out: int = 4) -> SglangRequest:
    return SglangRequest(Request(rid, Tokens(tokens), out))


def test_lpm_orders_by_hit_and_deprioritises_in_batch_duplicates() -> None:
    x, y = [7] * 40, [8] * 40
    waiting = [
        sreq(0, x),
        sreq(1, y + [1]),
        sreq(2, x + [2]),
        sreq(3, [9] * 40),
        sreq(4, y),
        sreq(5, [5] * 10),
    ]
    ctx = FakeContext({1: 40, 4: 33})
    order = LpmPolicy().order(waiting, ctx)
    assert order is not None
    # 1 (hit 40) and 4 (hit 33 > 32: never demoted) first; 2 repeats 0's first 32 tokens and
    # is demoted; 5 is shorter than 32 tokens and cannot be checked
    assert [r.rid for r in order] == [1, 4, 0, 3, 5, 2]


def test_lpm_falls_back_to_fcfs_above_the_threshold() -> None:
    waiting = [sreq(i, [i] * 4) for i in range(129)]
    assert LpmPolicy().order(waiting, FakeContext({128: 4})) is None
    assert LpmPolicy().order(waiting[:128], FakeContext({127: 4}))[0].rid == 127  # type: ignore[index]


def test_lof_is_longest_output_first_and_stable() -> None:
    waiting = [sreq(0, [1], 5), sreq(1, [1], 9), sreq(2, [1], 5), sreq(3, [1], 1)]
    assert [r.rid for r in LofPolicy().order(waiting, FakeContext({}))] == [1, 0, 2, 3]  # type: ignore[union-attr]


def test_lof_and_random_keep_a_half_prefilled_request_first() -> None:
    waiting = [sreq(i, [i] * 8, out=i) for i in range(6)]
    waiting[3].materialized = 4  # part-way through its chunks
    assert [r.rid for r in LofPolicy().order(waiting, FakeContext({}))] == [3, 5, 4, 2, 1, 0]  # type: ignore[union-attr]
    for seed in range(5):
        assert RandomPolicy(seed).order(waiting, FakeContext({}))[0].rid == 3  # type: ignore[index]


def test_random_is_seeded() -> None:
    waiting = [sreq(i, [i]) for i in range(12)]
    ctx = FakeContext({})

    def orders(seed: int) -> list[list[int]]:
        policy = RandomPolicy(seed)
        return [[r.rid for r in policy.order(waiting, ctx)] for _ in range(3)]  # type: ignore[union-attr]

    assert orders(3) == orders(3)
    assert orders(3) != orders(4)
    assert orders(3)[0] != orders(3)[1]  # the generator advances between passes
    assert sorted(orders(3)[0]) == list(range(12))


def _engine(policy: str, registry: Any = None, *, max_num_seqs: int = 1) -> Engine:
    factory = EngineFactory(
        EngineConfig(backend="sglang", max_num_seqs=max_num_seqs),
        SglangRank,
        FixedTiming(FixedTimingConfig(prefill_ms=10.0, decode_ms=1.0)),
        backend_config=SglangConfig(schedule_policy=policy),
    )

    def make_rank(identity):  # the provider-injection seam, with an explicit registry
        return SglangRank(
            identity, factory.config, factory.backend_config, factory.services, policy_registry=registry
        )

    return Engine.build(0, 1, make_rank)


def _admission_order(engine: Engine) -> list[int]:
    shared = list(range(100, 164))
    arrivals = [
        (0.0, Request(0, Tokens(shared + [1]), 3)),
        (1.0, Request(1, Tokens(list(range(500, 565))), 3)),
        (2.0, Request(2, Tokens(shared + [2] * 30), 1)),
        (3.0, Request(3, Tokens([9] * 5), 8)),
    ]
    result = drive(engine, arrivals)
    return [a.request_id for p in result.passes for r in p.by_rank for a in r.effects.admissions]


def test_engine_policies_reorder_the_waiting_queue() -> None:
    assert _admission_order(_engine("fcfs")) == [0, 1, 2, 3]
    assert _admission_order(_engine("fifo")) == [0, 1, 2, 3]
    assert _admission_order(_engine("lpm")) == [0, 2, 1, 3]  # 2 hits the cached prefix
    assert _admission_order(_engine("lof")) == [0, 3, 1, 2]


class ShortestPromptFirst(SchedulePolicy):
    def order(self, waiting: list[SglangRequest], ctx: Any) -> list[SglangRequest] | None:
        return sorted(waiting, key=lambda r: r.prompt_len)


class ThirdPartyPlugin:
    @hookimpl
    def servesim_register_schedule_policies(self, registry: Any) -> None:
        registry.add("shortest_prompt", ShortestPromptFirst)


def test_third_party_policy_registered_through_the_hook_is_selectable() -> None:
    pm = make_plugin_manager(autoload=False)
    pm.register(sglang_plugin, name="sglang")
    pm.register(ThirdPartyPlugin(), name="third_party")
    registry = Plugins(pm).schedule_policies()
    assert registry.names() == ["fcfs", "lof", "lpm", "random", "shortest_prompt"]
    assert registry.entry("shortest_prompt").plugin == "third_party"
    assert _admission_order(_engine("shortest_prompt", registry)) == [0, 3, 1, 2]


def test_unknown_policy_names_what_exists() -> None:
    pm = make_plugin_manager(autoload=False)
    pm.register(sglang_plugin, name="sglang")
    registry = Plugins(pm).schedule_policies()
    with pytest.raises(EngineError, match="unknown schedule_policy 'dfs'; installed: fcfs, lof, lpm, random"):
        _engine("dfs", registry)
    with pytest.raises(PluginError):
        registry.get("dfs")


def test_installed_plugin_registers_backend_and_policies() -> None:
    plugins = Plugins()
    assert plugins.backends().get("sglang") is SglangRank
    assert {"fcfs", "lpm", "lof", "random"} <= set(plugins.schedule_policies().names())
