"""The pool's fast KV event constructors build objects equal to the contract constructors, and
fall back to the constructor for any class whose ``__init__`` does more than store fields."""

from __future__ import annotations

import attrs
import pytest
from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks
from servesim.kv import event_build as eb


def same(fast: object, slow: object) -> None:
    assert type(fast) is type(slow)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)


def test_contract_event_types_are_plain_so_the_fast_path_is_used() -> None:
    for f in (eb.kv_event, eb.stored_blocks, eb.removed_blocks, eb.kv_block):
        assert not isinstance(f, type)


@pytest.mark.parametrize("n", [0, 1, eb._BULK_FROM - 1, eb._BULK_FROM, 45])  # noqa: SLF001
def test_fast_objects_equal_constructed_ones(n: int) -> None:
    hs = [2**63 - i for i in range(n)]
    local = [-i for i in range(n)]
    blocks = eb.kv_blocks(hs, local)
    same(blocks, tuple(KvBlock(h, lh) for h, lh in zip(hs, local, strict=True)))
    same(eb.kv_block(7, 8, (1, 2)), KvBlock(7, 8, (1, 2)))
    stored = eb.stored_blocks(None if n % 2 else 99, blocks, None)
    same(stored, StoredBlocks(None if n % 2 else 99, blocks))
    same(eb.removed_blocks(tuple(hs)), RemovedBlocks(tuple(hs)))
    same(eb.kv_event(n, 3, stored), KvEvent(n, 3, stored))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        eb.kv_block(1, 2, None).block_hash = 5  # type: ignore[misc]


@attrs.frozen(slots=True)
class Validated:
    a: int = attrs.field(validator=attrs.validators.instance_of(int))


@attrs.frozen(slots=True)
class PostInit:
    a: int

    def __attrs_post_init__(self) -> None:
        pass


@attrs.frozen(slots=False)
class NoSlots:
    a: int


@attrs.frozen(slots=True)
class Plain:
    a: int


@attrs.frozen(slots=True)
class ThreeDefaults:
    a: int
    b: int | None = None
    c: int = 2
    d: str | None = None


@attrs.frozen(slots=True)
class FourDefaults:
    a: int
    b: int = 1
    c: int = 2
    d: int = 3
    e: int = 4


def test_up_to_three_trailing_defaults_keep_the_fast_path() -> None:
    fast = eb.maker(ThreeDefaults, ("a",))
    assert fast is not ThreeDefaults
    same(fast(4), ThreeDefaults(4))
    assert eb.maker(FourDefaults, ("a",)) is FourDefaults


def test_classes_whose_init_does_more_keep_their_constructor() -> None:
    for cls in (Validated, PostInit, NoSlots):
        assert eb.maker(cls, ("a",)) is cls
    assert eb.maker(Plain, ("b",)) is Plain  # unexpected field names
    fast = eb.maker(Plain, ("a",))
    assert fast is not Plain
    same(fast(4), Plain(4))


@pytest.mark.parametrize("n", [0, 1, eb._BULK_FROM - 1, eb._BULK_FROM, 45])  # noqa: SLF001
def test_removed_events_equal_one_constructed_event_per_hash(n: int) -> None:
    hs = [2**64 - 1 - i for i in range(n)]
    got = eb.removed_events(17, 2, hs)
    assert type(got) is list
    same(tuple(got), tuple(KvEvent(17 + i, 2, RemovedBlocks((h,))) for i, h in enumerate(hs)))
