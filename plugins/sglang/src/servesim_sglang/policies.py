"""Waiting-queue orderings for the SGLang rank (``engine.sglang.schedule_policy``).

The set is open: built-ins are registered through the ``servesim_register_schedule_policies``
hook like any third-party policy, and the rank looks the configured name up in that registry.
A policy is a :class:`SchedulePolicy` subclass; the rank builds one instance per rank with the
rank's deterministic seed (``RankIdentity.seed_offset``).

Built-ins, after SGLang ``schedule_policy.py`` and dynamo-mocker.md §5:

* ``fcfs`` (alias ``fifo``): arrival order, untouched.
* ``lpm``: longest cached prefix first. Requests whose prefix hit is at most 32 tokens and
  whose first ``ceil(32/page)·page`` tokens repeat an earlier waiting request's are
  deprioritised (in-batch prefix caching: let the first one populate the cache). The sort is
  stable; above 128 waiting requests it falls back to FCFS, as SGLang does to bound its cost.
* ``lof``: longest output first (by planned output tokens), stable.
* ``random``: a seeded shuffle; the generator lives for the rank's lifetime, so a run is
  reproducible while successive passes still see different orders.

A request whose prefill is part-way through its chunks sits at the front of the queue the
policy orders (as in the reference, whose LPM sorts it with the rest). ``lof`` and ``random``
— not in the reference — keep such requests first, as SGLang does with its ``chunked_req``, so
a half-prefilled request never holds its KV while others overtake it.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

from servesim._compiled import mypyc_attr

if TYPE_CHECKING:
    from servesim.registry import Registry

    from servesim_sglang.request import SglangRequest


class PolicyContext(Protocol):
    """What a policy may read from the rank (read-only)."""

    @property
    def page_size(self) -> int: ...

    @property
    def lpm_fallback_threshold(self) -> int: ...

    @property
    def check_threshold(self) -> int: ...

    @property
    def deprioritize_threshold(self) -> int: ...

    def prefix_match_len(self, request: SglangRequest) -> int:
        """Tokens of the request's sequence currently in the radix cache (read-only)."""


@mypyc_attr(allow_interpreted_subclasses=True)
class SchedulePolicy(ABC):
    """Orders the waiting queue once per pass, before prefill admission."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    @abstractmethod
    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        """Return the new order (a permutation of ``waiting``) or None to keep it."""


class FcfsPolicy(SchedulePolicy):
    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        return None


class LpmPolicy(SchedulePolicy):
    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        if len(waiting) > ctx.lpm_fallback_threshold or len(waiting) < 2:
            return None
        page = max(1, ctx.page_size)
        dup_len = -(-ctx.deprioritize_threshold // page) * page
        seen: set[tuple[int, ...]] = set()
        scored = []
        for req in waiting:
            prefix = ctx.prefix_match_len(req)
            demote = False
            if prefix <= ctx.check_threshold and req.seq_len >= dup_len and dup_len > 0:
                head = tuple(req.tokens[:dup_len])
                demote = head in seen
                seen.add(head)
            scored.append((demote, -prefix, req))
        scored.sort(key=lambda s: (s[0], s[1]))
        return [s[2] for s in scored]


def _in_progress_first(waiting: list[SglangRequest]) -> tuple[list[SglangRequest], list[SglangRequest]]:
    started = [r for r in waiting if r.materialized > 0]
    rest = [r for r in waiting if r.materialized == 0] if started else waiting
    return started, rest


class LofPolicy(SchedulePolicy):
    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        started, rest = _in_progress_first(waiting)
        return started + sorted(rest, key=lambda r: -r.max_out)


class RandomPolicy(SchedulePolicy):
    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._rng = random.Random(seed)

    def order(self, waiting: list[SglangRequest], ctx: PolicyContext) -> list[SglangRequest] | None:
        started, rest = _in_progress_first(waiting)
        out = list(rest)
        self._rng.shuffle(out)
        return started + out


BUILTIN_POLICIES: dict[str, type[SchedulePolicy]] = {
    "fcfs": FcfsPolicy,
    "lpm": LpmPolicy,
    "lof": LofPolicy,
    "random": RandomPolicy,
}


def register_builtin_policies(registry: Registry) -> None:
    for name, cls in BUILTIN_POLICIES.items():
        registry.add(name, cls)


_DEFAULT_REGISTRY: list[Registry] = []


def default_policy_registry() -> Registry:
    """The ``schedule_policy`` registry of the default plugin manager (built once)."""
    if not _DEFAULT_REGISTRY:
        from servesim.plugins import Plugins

        _DEFAULT_REGISTRY.append(Plugins().schedule_policies())
    return _DEFAULT_REGISTRY[0]


def resolve_policy(name: str, registry: Registry | None = None) -> type[SchedulePolicy]:
    """Look ``name`` up (``fifo`` → ``fcfs``); raises PluginError listing what exists."""
    from servesim_sglang.config import canonical_policy

    key = canonical_policy(name)
    if registry is None and key in BUILTIN_POLICIES:
        # Registries refuse duplicate names, so a built-in name always means the built-in:
        # no need to load every installed plugin to find it.
        return BUILTIN_POLICIES[key]
    reg = registry if registry is not None else default_policy_registry()
    cls = reg.get(key)
    if not (isinstance(cls, type) and issubclass(cls, SchedulePolicy)):
        from servesim.errors import PluginError

        raise PluginError(f"schedule_policy {name!r} is not a SchedulePolicy subclass")
    return cls
