"""The kv router's LoRA adapter affinity (servesim.replay.adapter_affinity) and per-adapter
overlap: a slot recently sent an adapter gets a cost credit for its requests; prefixes cached
under one adapter do not count for another."""

from __future__ import annotations

from servesim.contract import KvBlock, KvEvent, Request, StoredBlocks
from servesim.kv.adapter_hashes import prompt_hashes
from servesim.replay.cluster import ClusterState
from servesim.replay.routers import KvRouter, KvRouterConfig
from servesim.tokens import Tokens

BS = 4


def _req(rid: int, lora: int, n: int = 8) -> Request:
    return Request(rid, Tokens([rid * 1000 + i for i in range(n)]), 4, lora=lora)


def _route(router: KvRouter, state: ClusterState, request: Request) -> int:
    hashes = prompt_hashes(request.prompt, BS, request.lora)
    worker, dp = router.select(request, hashes, state)
    router.routed(request, worker, dp, state)
    return worker


def test_affinity_keeps_an_adapter_on_the_worker_it_was_sent_to() -> None:
    on = KvRouter(2, 1, BS, KvRouterConfig(adapter_affinity=5.0, adapter_slots=2))
    off = KvRouter(2, 1, BS)
    picks_on, picks_off = [], []
    for router, picks in ((on, picks_on), (off, picks_off)):
        state = ClusterState(2, 1)
        for rid in range(4):
            picks.append(_route(router, state, _req(rid, lora=7)))
    assert picks_off == [0, 1, 0, 1]  # load balance alone alternates
    # An 8-token request costs 2 (prefill) + 2 (blocks) on an idle worker and 4 more per
    # request in flight there. With the credit of 5: the second request stays on worker 0
    # (8 - 5 = 3 < 4), the third goes to worker 1 (12 - 5 = 7 > 4), which now holds the
    # adapter too, so the fourth stays there (8 - 5 = 3 < 7).
    assert picks_on == [0, 0, 1, 1]


def test_the_routed_set_holds_the_last_adapter_slots_adapters() -> None:
    router = KvRouter(1, 1, BS, KvRouterConfig(adapter_affinity=1.0, adapter_slots=2))
    state = ClusterState(1, 1)
    for rid, lora in enumerate([1, 2, 1, 3, 0]):
        _route(router, state, _req(rid, lora))
    assert router.affinity is not None and list(router.affinity.sets[0]) == [1, 3]
    assert router.affinity.adjust(3, [10.0]) == [9.0] and router.affinity.adjust(2, [10.0]) == [10.0]
    assert router.affinity.adjust(0, [10.0]) == [10.0]  # the base model has no adapter


def test_overlap_counts_per_adapter() -> None:
    """Blocks stored by an adapter-3 request on worker 1 attract adapter-3 requests of the
    same prompt, and not base-model or adapter-4 ones."""
    prompt = Tokens(list(range(16)))
    router = KvRouter(2, 1, BS)
    stored = prompt_hashes(prompt, BS, 3)
    router.on_kv_events(1, [KvEvent(0, 0, StoredBlocks(None, tuple(KvBlock(h, h) for h in stored)))])
    state = ClusterState(2, 1)
    for lora, costs_equal in ((3, False), (4, True), (0, True)):
        cost, _new = router.costs(Request(9, prompt, 4, lora=lora), prompt_hashes(prompt, BS, lora), state)
        assert (cost[0] == cost[1]) is costs_equal, lora


def test_bad_affinity_settings_name_their_key() -> None:
    import pytest
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="cluster.router_config.adapter_affinity"):
        KvRouter(2, 1, BS, KvRouterConfig(adapter_affinity=float("inf")))
    with pytest.raises(ConfigError, match="cluster.router_config.adapter_slots"):
        KvRouter(2, 1, BS, KvRouterConfig(adapter_affinity=1.0, adapter_slots=0))
