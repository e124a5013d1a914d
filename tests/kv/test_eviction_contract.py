"""The eviction contract: the check kit fails on broken policies and passes on lru; the record
pool's records and hit notifications; validation builds the policy and asks the backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from servesim.cli.main import main
from servesim.kv.eviction import EvictableBlock, LruEviction, RecordEvictionPolicy
from servesim.kv.eviction_keyed import KeyedEviction
from servesim.kv.eviction_records import RecordBlockPool, make_block_pool
from servesim.kv.pool import BlockPool, BlockTable
from servesim.registry import Registry
from servesim.testing import check_eviction_policy


class Fifo(KeyedEviction):
    """Insertion order: a correct policy the broken ones below start from."""

    def key(self, block: EvictableBlock) -> int:
        return 0


class EvictsStrangers(Fifo):
    def evict(self, now_ms: float) -> EvictableBlock:
        super().evict(now_ms)
        return EvictableBlock(-1, None, None, 0, 16)


class ForgetsToShrink(Fifo):
    def __len__(self) -> int:
        return self._order


class IgnoresRemove(Fifo):
    def remove(self, block: EvictableBlock, now_ms: float) -> None:
        pass


class Unstable(Fifo):
    made = 0

    def __init__(self) -> None:
        super().__init__()
        Unstable.made += 1
        self.flip = Unstable.made % 2  # every other instance orders the other way

    def key(self, block: EvictableBlock) -> int:
        return -block.block_id if self.flip else block.block_id


class PopsWrongId(LruEviction):
    def pop(self) -> int:
        return super().pop() + 1000


@pytest.mark.parametrize(
    ("policy", "failing"),
    [
        (EvictsStrangers, "evicts_what_it_holds: evicted EvictableBlock(block_id=-1"),
        (ForgetsToShrink, "evicts_what_it_holds: len() is 24 with 23 units held"),
        (IgnoresRemove, "remove: EvictableBlock(block_id=9, block_hash=1005"),
        (Unstable, "deterministic: the same calls evicted"),
        (PopsWrongId, "evicts_what_it_holds: evicted 1005, which it does not hold"),
    ],
)
def test_the_kit_fails_broken_policies(policy: type, failing: str) -> None:
    report = check_eviction_policy(policy, raise_on_failure=False)
    assert any(f.startswith(failing) for f in report.failures), report.failures
    with pytest.raises(AssertionError, match="eviction policy conformance failed"):
        report.raise_if_failed()


def test_the_kit_passes_lru_and_a_correct_record_policy() -> None:
    for policy in (LruEviction, Fifo):
        assert check_eviction_policy(policy).failures == []


class Recorder(Fifo):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int, int, float]] = []

    def insert(self, block: EvictableBlock, now_ms: float) -> None:
        self.calls.append(("insert", block.block_id, block.ref_count, block.hit_count, now_ms))
        super().insert(block, now_ms)

    def remove(self, block: EvictableBlock, now_ms: float) -> None:
        self.calls.append(("remove", block.block_id, block.ref_count, block.hit_count, now_ms))
        super().remove(block, now_ms)

    def hit(self, block: EvictableBlock, now_ms: float) -> None:
        self.calls.append(("hit", block.block_id, block.ref_count, block.hit_count, now_ms))


def test_the_record_pool_reports_every_change() -> None:
    pol = Recorder()
    pool = make_block_pool(4, eviction=pol, block_size=8)
    assert isinstance(pool, RecordBlockPool) and pool.steps_only
    assert type(make_block_pool(4, eviction=LruEviction(), block_size=8)) is BlockPool
    a, b, c = BlockTable(prompt_len=12), BlockTable(prompt_len=12), BlockTable(prompt_len=12)
    pool.now = 1.0
    assert pool.allocate(a, 2)
    pool.finalize(a, 2, [1, 2], [1, 2])
    pool.now = 2.0
    assert pool.allocate(b, 2, [1, 2])  # two hits on blocks in use
    pool.now = 3.0
    pool.release(a)
    pool.release(b)  # now evictable, tail first
    pool.now = 4.0
    assert pool.allocate(c, 1, [1])  # reuse of an evictable block
    assert pol.calls == [
        ("hit", 0, 2, 1, 2.0), ("hit", 1, 2, 1, 2.0),
        ("insert", 1, 0, 1, 3.0), ("insert", 0, 0, 1, 3.0),
        ("remove", 0, 0, 1, 4.0),
    ]
    r0 = pool.records[0]
    assert r0 is not None and (r0.hit_count, r0.ref_count, r0.last_access_ms) == (2, 1, 4.0)
    r1 = pool.records[1]
    assert r1 is not None
    assert (r1.block_hash, r1.parent_hash, r1.position, r1.num_tokens, r1.generated, r1.tier) == (
        2, 1, 1, 8, True, 0
    )


class Broken(RecordEvictionPolicy):
    def __init__(self) -> None:
        raise ValueError("no capacity given")

    insert = remove = evict = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return 0

    def __contains__(self, block: object) -> bool:
        return False


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> tuple[int, str]:
    path = tmp_path / "sim.yaml"
    path.write_text(f"engine: {engine}\n")
    rc = main(["validate", str(path)])
    return rc, capsys.readouterr().err.replace(str(path), "FILE")


def test_validation_builds_the_policy_and_asks_the_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, err = _validate(tmp_path, capsys, "{backend: toy, eviction_policy: lfu}")
    assert (rc, err) == (2, "servesim: error: FILE: engine.eviction_policy: backend 'toy' cannot "
                         "drive an eviction policy that orders block records (plugin lfu from servesim-lfu 0.1.0)\n")
    rc, err = _validate(tmp_path, capsys, "{eviction_policy: {type: lineage, depth: 2}}")
    assert (rc, err) == (2, "servesim: error: FILE: engine.eviction_policy.depth: unknown key; "
                         "eviction policy 'lineage' takes no options\n")
    rc, err = _validate(tmp_path, capsys, "{eviction_policy: {depth: 2}}")
    assert (rc, err) == (2, "servesim: error: FILE: engine.eviction_policy.type: required key missing\n")
    rc, err = _validate(tmp_path, capsys, "{eviction_policy: 3}")
    assert rc == 2 and err.startswith("servesim: error: FILE: engine.eviction_policy: expected a name")

    from servesim.plugins import Plugins

    real = Plugins.registry

    def with_broken(self: Any, kind: str) -> Registry:
        reg = real(self, kind)
        if kind == "eviction_policy" and "broken" not in reg:
            reg.set_source("brokenplug", "servesim-broken")  # noqa: SLF001
            reg.add("broken", Broken)
        return reg

    monkeypatch.setattr(Plugins, "registry", with_broken)
    rc, err = _validate(tmp_path, capsys, "{eviction_policy: broken}")
    assert (rc, err) == (2, "servesim: error: FILE: engine.eviction_policy: eviction policy 'broken' "
                         "failed to build: ValueError('no capacity given') (plugin brokenplug from "
                         "servesim-broken)\n")
