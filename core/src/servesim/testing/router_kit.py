"""A check kit for request routers.

``check_router(router_class, config=None)`` drives fresh routers as the replay driver does
(servesim.replay.driver: ``select``, then ``routed``; KV events of the chosen worker when the
router wants them; prefill done and finish as requests progress) over a seeded workload with
shared prefixes, on clusters of several shapes, and checks:

* ``is_router``: the class is a :class:`~servesim.replay.routers.Router`;
* ``choices_in_range``: every choice is a pair of ints ``(worker, dp_rank)`` inside the
  cluster;
* ``select_leaves_state_alone``: ``select`` does not change the cluster state (only
  ``routed`` records a decision);
* ``deterministic``: two fresh routers given the same requests choose the same slots (same
  config and seed, same report bytes);
* ``records_routed``: after ``routed`` the chosen slot counts the request as in flight.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable
from typing import Any

from servesim.contract import KvBlock, KvEvent, Request, StoredBlocks
from servesim.replay.cluster import STATE_FIELDS, ClusterState
from servesim.replay.routers import Router
from servesim.testing.conformance import ConformanceReport
from servesim.testing.kit import run_checks
from servesim.tokens import RepeatedBlockTokens

BLOCK = 16
SHAPES = ((1, 1), (3, 1), (2, 2))


class _Subject:
    def __init__(self, router_class: type, config: Any) -> None:
        self.router_class = router_class
        self.config = config


def kit_requests(n: int = 40, seed: int = 7) -> list[tuple[Request, list[int]]]:
    """Seeded requests (four shared prefixes) with their prompts' block hashes."""
    rng = random.Random(seed)
    out = []
    for rid in range(n):
        group = rng.randrange(4)
        shared = [1000 * (group + 1) + i for i in range(rng.randrange(1, 4))]
        own = [10_000 + 100 * rid + i for i in range(rng.randrange(0, 3))]
        prompt = RepeatedBlockTokens(shared + own, BLOCK, BLOCK * len(shared + own) - rng.randrange(BLOCK))
        out.append((Request(rid, prompt, rng.randrange(1, 8)), prompt.block_hashes(BLOCK)[0]))
    return out


def _snapshot(state: ClusterState) -> dict[str, Any]:
    return {name: copy.deepcopy(getattr(state, name)) for name in STATE_FIELDS}


def _drive(s: _Subject, workers: int, dp: int, problems: list[str] | None = None) -> list[tuple[int, int]]:
    """Route every kit request; finish each one four arrivals later."""
    router = s.router_class(workers, dp, BLOCK, s.config)
    state = ClusterState(workers, dp)
    chosen: list[tuple[int, int]] = []
    for request, hashes in kit_requests():
        offered = hashes if router.wants_block_hashes else []
        before = _snapshot(state) if problems is not None else None
        choice = router.select(request, offered, state)
        if problems is not None and _snapshot(state) != before:
            problems.append(f"select changed the cluster state (request {request.request_id})")
        chosen.append(tuple(choice))
        worker, rank = choice
        router.routed(request, worker, rank, state)
        if router.wants_kv_events:
            blocks = tuple(KvBlock(h, h) for h in hashes)
            router.on_kv_events(worker, [KvEvent(request.request_id, rank, StoredBlocks(None, blocks))])
        state.prefill_done(request.request_id)
        done = request.request_id - 4
        if done >= 0:
            state.finish(done)
    return chosen


def check_is_router(s: _Subject) -> list[str]:
    ok = isinstance(s.router_class, type) and Router in s.router_class.__mro__
    return [] if ok else [f"{s.router_class!r} is not a Router subclass"]


def check_choices_in_range(s: _Subject) -> list[str]:
    bad = []
    for workers, dp in SHAPES:
        for i, choice in enumerate(_drive(s, workers, dp)):
            valid = (
                len(choice) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in choice)
                and 0 <= choice[0] < workers
                and 0 <= choice[1] < dp
            )
            if not valid:
                bad.append(f"{workers} workers x dp {dp}: request {i} routed to {choice!r}")
    return bad[:10]


def check_select_leaves_state_alone(s: _Subject) -> list[str]:
    problems: list[str] = []
    _drive(s, 3, 2, problems)
    return problems[:5]


def check_deterministic(s: _Subject) -> list[str]:
    bad = []
    for workers, dp in SHAPES:
        if _drive(s, workers, dp) != _drive(s, workers, dp):
            bad.append(f"{workers} workers x dp {dp}: two fresh routers chose differently")
    return bad


def check_records_routed(s: _Subject) -> list[str]:
    router = s.router_class(3, 1, BLOCK, s.config)
    state = ClusterState(3, 1)
    request, hashes = kit_requests(1)[0]
    worker, rank = router.select(request, hashes if router.wants_block_hashes else [], state)
    router.routed(request, worker, rank, state)
    slot = state.slot(worker, rank)
    if state.prefill_tokens[slot] != request.prompt_len:
        return [
            f"after routed, slot {slot} holds {state.prefill_tokens[slot]} pending prefill tokens, "
            f"expected the prompt's {request.prompt_len}"
        ]
    return []


ROUTER_CHECKS = {
    "is_router": check_is_router,
    "choices_in_range": check_choices_in_range,
    "select_leaves_state_alone": check_select_leaves_state_alone,
    "deterministic": check_deterministic,
    "records_routed": check_records_routed,
}
"""Every router check by name, in the order :func:`check_router` runs them."""


def check_router(
    router_class: type, config: Any = None, *, skip: Iterable[str] = (), raise_on_failure: bool = True
) -> ConformanceReport:
    """Run every router check (minus ``skip``) on ``router_class`` built with ``config``."""
    return run_checks(
        "router", ROUTER_CHECKS, _Subject(router_class, config), skip=skip, raise_on_failure=raise_on_failure
    )


__all__ = ["ROUTER_CHECKS", "check_router", "kit_requests"]
