"""The eviction-policy check kit: the contract's invariants against any policy.

Call it from a plugin's tests with a zero-argument factory::

    from servesim.testing import check_eviction_policy

    def test_my_policy_conforms() -> None:
        check_eviction_policy(MyPolicy)

It checks both kinds (:class:`~servesim.kv.eviction.EvictionPolicy`, ordering block ids, and
:class:`~servesim.kv.eviction.RecordEvictionPolicy`, ordering records): a new policy is empty;
it evicts exactly the units it holds, each once, with ``len`` and ``in`` agreeing at every
step; a removed unit is never evicted; a unit may come back after it left; two policies fed
the same calls evict in the same order; hits on units in use change nothing it holds; and it
can drive a real block pool (:mod:`servesim.kv.eviction_records`) through a seeded workload
of shared prefixes, releases and evictions with the pool's accounting intact.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from servesim.kv.eviction import EvictableBlock, uses_records
from servesim.kv.eviction_records import make_block_pool
from servesim.kv.hashing import chain_hash
from servesim.kv.pool import BlockTable
from servesim.testing.conformance import ConformanceReport

MakePolicy = Callable[[], Any]


class _Units:
    """Hands a policy of either kind the same calls: units are records or block ids."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.records = uses_records(policy)
        self.now = 0.0

    def unit(self, i: int, chain: int = 0, position: int = 0, hits: int = 0) -> Any:
        if not self.records:
            return i
        h = 1000 * chain + position + 1
        return EvictableBlock(i, h, h - 1 if position else None, position, 16, hit_count=hits,
                              last_access_ms=self.now)

    def insert(self, u: Any) -> None:
        self.now += 1.0
        if self.records:
            self.policy.insert(u, self.now)
        else:
            self.policy.push(u)

    def remove(self, u: Any) -> None:
        if self.records:
            self.policy.remove(u, self.now)
        else:
            self.policy.remove(u)

    def evict(self) -> Any:
        return self.policy.evict(self.now) if self.records else self.policy.pop()

    def hit(self, u: Any) -> None:
        if self.records:
            self.policy.hit(u, self.now)


def _chains(units: _Units, n_chains: int, length: int, start: int = 0) -> list[Any]:
    """Units of ``n_chains`` sequences, each inserted tail first as a pool releases them."""
    out = []
    for c in range(n_chains):
        chain = [units.unit(start + c * length + p, c, p, hits=(c * 7 + p) % 4) for p in range(length)]
        out.extend(reversed(chain))
    return out


def _drain(units: _Units, held: list[Any]) -> list[str]:
    """Evict everything, checking each victim and the size at every step."""
    key: Callable[[Any], Any] = id if units.records else (lambda u: u)
    remaining = {key(u): u for u in held}
    problems: list[str] = []
    while remaining:
        if len(units.policy) != len(remaining):
            return problems + [f"len() is {len(units.policy)} with {len(remaining)} units held"]
        victim = units.evict()
        if remaining.pop(key(victim), None) is None:
            return problems + [f"evicted {victim!r}, which it does not hold"]
        if victim in units.policy:
            problems.append(f"{victim!r} is still 'in' the policy after it was evicted")
    if len(units.policy):
        problems.append(f"len() is {len(units.policy)} after every unit was evicted")
    return problems


def _check_empty(make: MakePolicy) -> list[str]:
    units = _Units(make())
    problems = []
    if len(units.policy):
        problems.append(f"a new policy has len() {len(units.policy)}")
    if units.unit(0) in units.policy:
        problems.append("a new policy says it holds a unit")
    return problems


def _check_evicts_what_it_holds(make: MakePolicy) -> list[str]:
    units = _Units(make())
    held = _chains(units, 4, 6)
    for u in held:
        units.insert(u)
        if u not in units.policy:
            return [f"{u!r} is not 'in' the policy after insert"]
    return _drain(units, held)


def _check_remove(make: MakePolicy) -> list[str]:
    units = _Units(make())
    held = _chains(units, 3, 5)
    for u in held:
        units.insert(u)
    # Remove whole chains' heads last-first, as reuse takes a prefix: here every other unit
    # of the first chain's prefix and the whole second chain.
    gone = held[5:10] + held[3:5]
    for u in gone:
        units.remove(u)
        if u in units.policy:
            return [f"{u!r} is still 'in' the policy after remove"]
    return _drain(units, [u for u in held if all(u is not g for g in gone)])


def _check_reinsert(make: MakePolicy) -> list[str]:
    units = _Units(make())
    first = _chains(units, 2, 3)
    for u in first:
        units.insert(u)
    problems = _drain(units, first)
    again = _chains(units, 2, 3)  # the same ids (fresh records): units that came back
    for u in again:
        units.insert(u)
    return problems + _drain(units, again)


def _script(units: _Units, seed: int) -> list[Any]:
    """A seeded mix of inserts, hits, removes and evictions; returns the eviction order."""
    rng = random.Random(seed)
    pending = _chains(units, 6, 5)
    held: list[Any] = []
    order = []
    for u in pending:
        units.insert(u)
        held.append(u)
        if rng.random() < 0.3:
            units.hit(units.unit(999, 9, 0, hits=rng.randrange(5)))
        if rng.random() < 0.2 and held:
            units.remove(held.pop(rng.randrange(len(held))))
        if rng.random() < 0.3 and len(units.policy):
            v = units.evict()
            order.append(v if not units.records else v.block_id)
            held = [h for h in held if h is not v and h != v]
    while len(units.policy):
        v = units.evict()
        order.append(v if not units.records else v.block_id)
    return order


def _check_deterministic(make: MakePolicy) -> list[str]:
    a = _script(_Units(make()), 11)
    b = _script(_Units(make()), 11)
    return [] if a == b else [f"the same calls evicted {a[:8]}... then {b[:8]}..."]


def _check_hits(make: MakePolicy) -> list[str]:
    units = _Units(make())
    if not units.records:
        return []
    held = _chains(units, 2, 4)
    for u in held:
        units.insert(u)
    for i in range(5):
        units.hit(units.unit(100 + i, 5, i, hits=3))
    if len(units.policy) != len(held):
        return [f"hits on units in use changed len() to {len(units.policy)}"]
    return _drain(units, held)


def _check_drives_a_pool(make: MakePolicy) -> list[str]:
    """A seeded replay of shared prefixes against a 40-block pool."""
    policy = make()
    pool = make_block_pool(40, eviction=policy, block_size=4, emit_events=True)
    rng = random.Random(5)
    live: list[BlockTable] = []
    stored: set[int] = set()
    for step in range(300):
        pool.now = float(step)
        if live and (rng.random() < 0.45 or pool.num_free + pool.num_inactive < 8):
            pool.release(live.pop(rng.randrange(len(live))))
        else:
            group, own = rng.randrange(4), rng.randrange(1000)
            hashes = []
            h = None
            for i in range(rng.randrange(2, 8)):
                h = chain_hash(h, group * 100 + i if i < 3 else own * 100 + i)
                hashes.append(h)
            cached, _ = pool.lookup(hashes)
            table = BlockTable(prompt_len=4 * len(hashes))
            if pool.allocate(table, len(hashes), hashes[:cached]):
                pool.finalize(table, len(hashes), hashes, hashes)
                live.append(table)
        if pool.num_inactive != len(policy):
            return [f"step {step}: the pool holds {pool.num_inactive} inactive blocks, the "
                    f"policy {len(policy)}"]
        for event in pool.drain_events():
            data = event.data
            for blk in getattr(data, "blocks", ()):
                stored.add(blk.block_hash)
            for gone in getattr(data, "block_hashes", ()):
                if gone not in stored:
                    return [f"step {step}: Removed {gone:#x}, which was never stored"]
                stored.discard(gone)
    while live:
        pool.release(live.pop())
    table = BlockTable()
    if not pool.allocate(table, pool.capacity):
        return ["a drained pool could not evict every cached block"]
    return [] if len(policy) == 0 else [f"len() is {len(policy)} after the pool evicted all"]


EVICTION_CHECKS: dict[str, Callable[[MakePolicy], list[str]]] = {
    "empty": _check_empty,
    "evicts_what_it_holds": _check_evicts_what_it_holds,
    "remove": _check_remove,
    "reinsert": _check_reinsert,
    "deterministic": _check_deterministic,
    "hits": _check_hits,
    "drives_a_pool": _check_drives_a_pool,
}


def check_eviction_policy(
    make_policy: MakePolicy, *, skip: Iterable[str] = (), raise_on_failure: bool = True
) -> ConformanceReport:
    """Run every check (minus ``skip``) against policies from ``make_policy``; an exception
    escaping a check is that check's failure."""
    skipped = set(skip)
    unknown = skipped - set(EVICTION_CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {', '.join(EVICTION_CHECKS)}")
    report = ConformanceReport(subject="eviction policy")
    for name, check in EVICTION_CHECKS.items():
        if name in skipped:
            continue
        report.checks.append(name)
        try:
            problems = check(make_policy)
        except Exception as exc:  # a crashing policy is a failure, not a kit bug
            problems = [f"raised {type(exc).__name__}: {exc}"]
        report.failures.extend(f"{name}: {p}" for p in problems)
    if raise_on_failure:
        report.raise_if_failed()
    return report


def replay_under(backend: str, policy: Any, *sets: str) -> dict[str, Any]:
    """Replay a small seeded prefix-heavy multi-turn workload on one ``backend`` worker with
    ``engine.eviction_policy: policy`` and a pool small enough to evict and preempt; returns
    the report (``vllm bench serve`` key names). A plugin's replay tests pin its figures."""
    import json

    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    base = [
        f"engine.backend={backend}", f"engine.eviction_policy={json.dumps(policy)}",
        "engine.num_gpu_blocks=160", "engine.block_size=16",
        "workload.seed=3", "workload.synthetic.num_requests=120", "workload.synthetic.rate=6",
        "workload.synthetic.input_length=uniform:256:640", "workload.synthetic.output_length=uniform:16:96",
        "workload.synthetic.prefix_groups=5", "workload.synthetic.prefix_ratio=0.6",
        "workload.synthetic.turns_per_session=2", "workload.synthetic.block_size=16",
    ]
    return simulate(load_config(None, [*base, *sets])).report


def replay_figures(backend: str, policy: Any) -> tuple[float, int, float]:
    """``(prefix-hit rate, preemptions, p99 TTFT ms)`` of :func:`replay_under`, after checking
    that every request completed: the row of docs/eviction.md a plugin's tests pin."""
    report = replay_under(backend, policy)
    if report["completed"] != report["num_requests"]:
        raise AssertionError(f"{report['completed']} of {report['num_requests']} requests completed")
    return report["prefix_cache_hit_rate"], report["num_preemptions"], report["p99_ttft_ms"]


__all__ = ["EVICTION_CHECKS", "check_eviction_policy", "replay_figures", "replay_under"]
