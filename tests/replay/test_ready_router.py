"""The elastic cluster's router view: round robin across changes of the ready workers.

Dynamo's replay (ai-dynamo 1.6.1) goes on after the worker it chose last when a worker joins
(checked on its per-request records: a 1->2 and a 2->3 scale send the next request to the
worker after the last one chosen, not to the first worker nor to the pick count modulo the
new size).
"""

from __future__ import annotations

from servesim.contract import Request
from servesim.replay.cluster import ClusterState
from servesim.replay.ready_router import ReadyRouter
from servesim.replay.routers import RoundRobinRouter
from servesim.tokens import Tokens


def picks(router: ReadyRouter, n: int) -> list[int]:
    out = []
    for rid in range(n):
        req = Request(rid, Tokens([rid + 1]), 1)
        w, dp = router.select(req, (), ClusterState(1, 1))
        router.routed(req, w, dp, ClusterState(1, 1))
        out.append(w)
    return out


def test_round_robin_goes_on_after_the_last_choice_when_workers_join():
    router = ReadyRouter(RoundRobinRouter(1, 1, 16), [0])
    assert picks(router, 3) == [0, 0, 0]
    router.set_ready([0, 1])
    assert picks(router, 3) == [1, 0, 1]
    router.set_ready([0, 1, 2])
    assert picks(router, 4) == [2, 0, 1, 2]


def test_round_robin_after_the_last_choice_left_takes_the_next_id():
    router = ReadyRouter(RoundRobinRouter(3, 1, 16), [0, 1, 2])
    assert picks(router, 2) == [0, 1]
    router.set_ready([0, 2])  # worker 1, chosen last, leaves
    assert picks(router, 3) == [2, 0, 2]
    router.set_ready([0])
    router.set_ready([0, 1, 2])  # last chosen 2: wrap to the first
    assert picks(router, 2) == [0, 1]


def test_a_fresh_router_starts_at_the_first_worker():
    router = ReadyRouter(RoundRobinRouter(2, 1, 16), [])
    router.set_ready([3, 5])
    assert picks(router, 3) == [3, 5, 3]
