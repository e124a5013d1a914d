"""Fast construction of the KV event objects a :class:`~servesim.kv.pool.BlockPool` publishes.

The contract types (:class:`KvEvent`, :class:`StoredBlocks`, :class:`RemovedBlocks`,
:class:`KvBlock`) are frozen slotted attrs classes: their generated ``__init__`` runs a Python
frame and one guarded ``object.__setattr__`` per field. With KV events on, the pool builds
one ``KvBlock`` per newly cached block and one event per allocation or finalisation, so that
constructor shows up in replay profiles. Filling the slots of a bare instance directly gives
an equal object (same class, same field values; ``==``, ``hash`` and ``repr`` agree) at a
fraction of the cost. That is only the same thing while the class is *plain*: exactly the
expected fields, no validator, converter or init hook, and attrs' own ``__init__``. Each maker
checks this once at import and otherwise falls back to calling the class.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, cast

import attrs

from servesim.contract import KvBlock, KvEvent, RemovedBlocks, StoredBlocks

#: From this many blocks on, :func:`kv_blocks` fills each field with one C-level map over all
#: blocks; below it, per-block calls are cheaper than setting the maps up.
_BULK_FROM = 8
#: attrs' ``Factory`` class (its stubs type the name as an overloaded function).
_FACTORY = cast(type, attrs.Factory)


def is_plain(cls: type, names: tuple[str, ...]) -> bool:
    """Whether ``cls`` is a slotted attrs class whose ``__init__`` does nothing but store the
    fields ``names`` (in this order) and, after them, fields with plain default values."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return False
    fields = attrs.fields(cls)
    init = getattr(cls.__init__, "__code__", None)
    rest = fields[len(names):]
    return (
        tuple(f.name for f in fields[:len(names)]) == names
        and all(f.default is not attrs.NOTHING and not isinstance(f.default, _FACTORY)
                for f in rest)
        and all(f.validator is None and f.converter is None and f.init for f in fields)
        and all(type(cls.__dict__.get(f.name)).__name__ == "member_descriptor" for f in fields)
        and not hasattr(cls, "__attrs_pre_init__")
        and not hasattr(cls, "__attrs_post_init__")
        and init is not None
        and init.co_filename.startswith("<attrs generated")
    )


def maker(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """``f(*values)`` building ``cls`` from the values of its fields ``names``, positionally;
    up to three later fields keep their defaults (with more, the class itself is returned)."""
    if not is_plain(cls, names):
        return cls
    base = _slot_maker(cls, names)
    rest = attrs.fields(cls)[len(names):]
    if base is None or len(rest) > 3:
        return cls
    if not rest:
        return base
    set_default, default = cls.__dict__[rest[0].name].__set__, rest[0].default
    if len(rest) == 3:  # StoredBlocks: medium, lora_id, lora_name
        set_second, second = cls.__dict__[rest[1].name].__set__, rest[1].default
        set_third, third = cls.__dict__[rest[2].name].__set__, rest[2].default

        def make_with_three_defaults(*values: object) -> Any:
            o = base(*values)
            set_default(o, default)
            set_second(o, second)
            set_third(o, third)
            return o

        return make_with_three_defaults
    if len(rest) == 2:
        set_second, second = cls.__dict__[rest[1].name].__set__, rest[1].default

        def make_with_defaults(*values: object) -> Any:
            o = base(*values)
            set_default(o, default)
            set_second(o, second)
            return o

        return make_with_defaults

    def make_with_default(*values: object) -> Any:
        o = base(*values)
        set_default(o, default)
        return o

    return make_with_default


def _slot_maker(cls: type, names: tuple[str, ...]) -> Callable[..., Any] | None:
    new = object.__new__
    sets = [cls.__dict__[n].__set__ for n in names]
    if len(names) == 1:
        (s0,) = sets

        def make1(a: object) -> Any:
            o: Any = new(cls)
            s0(o, a)
            return o

        return make1
    if len(names) == 3:
        s0, s1, s2 = sets

        def make3(a: object, b: object, c: object) -> Any:
            o: Any = new(cls)
            s0(o, a)
            s1(o, b)
            s2(o, c)
            return o

        return make3
    return None


kv_event: Callable[[int, int, object], KvEvent] = maker(KvEvent, ("event_id", "dp_rank", "data"))
stored_blocks: Callable[[int | None, tuple[KvBlock, ...], int | None], StoredBlocks] = maker(
    StoredBlocks, ("parent_hash", "blocks", "start_position"))
removed_blocks: Callable[[tuple[int, ...]], RemovedBlocks] = maker(RemovedBlocks, ("block_hashes",))
kv_block: Callable[[int, int, tuple[int, ...] | None], KvBlock] = maker(
    KvBlock, ("block_hash", "tokens_hash", "token_ids"))


def _bulk_kv_blocks() -> Callable[[Sequence[int], Sequence[int]], tuple[KvBlock, ...]] | None:
    if kv_block is KvBlock:
        return None
    new = object.__new__
    slots = KvBlock.__dict__
    set_hash = slots["block_hash"].__set__
    set_local = slots["tokens_hash"].__set__
    set_ids = slots["token_ids"].__set__

    def bulk(hs: Sequence[int], local: Sequence[int]) -> tuple[KvBlock, ...]:
        out = list(map(new, repeat(KvBlock, len(hs))))
        deque(map(set_hash, out, hs), 0)
        deque(map(set_local, out, local), 0)
        deque(map(set_ids, out, repeat(None)), 0)
        return tuple(out)

    return bulk


_bulk = _bulk_kv_blocks()


def kv_blocks(hs: Sequence[int], local: Sequence[int]) -> tuple[KvBlock, ...]:
    """``KvBlock(hs[i], local[i])`` for every i (no token ids); ``local`` as long as ``hs``."""
    if _bulk is not None and len(hs) >= _BULK_FROM:
        return _bulk(hs, local)
    return tuple(map(kv_block, hs, local, repeat(None, len(hs))))


def _bulk_removed() -> Callable[[int, int, Sequence[int]], list[KvEvent]] | None:
    if kv_event is KvEvent or removed_blocks is RemovedBlocks:
        return None
    new = object.__new__
    ev_slots, rm_slots = KvEvent.__dict__, RemovedBlocks.__dict__
    set_id, set_dp, set_data = (ev_slots[n].__set__ for n in ("event_id", "dp_rank", "data"))
    set_hashes, set_medium = rm_slots["block_hashes"].__set__, rm_slots["medium"].__set__

    def bulk_removed(first_id: int, dp_rank: int, hashes: Sequence[int]) -> list[KvEvent]:
        n = len(hashes)
        datas = list(map(new, repeat(RemovedBlocks, n)))
        deque(map(set_hashes, datas, zip(hashes)), 0)  # zip of one sequence: 1-tuples
        deque(map(set_medium, datas, repeat(None)), 0)
        out = list(map(new, repeat(KvEvent, n)))
        deque(map(set_id, out, range(first_id, first_id + n)), 0)
        deque(map(set_dp, out, repeat(dp_rank)), 0)
        deque(map(set_data, out, datas), 0)
        return out

    return bulk_removed


_bulk_rm = _bulk_removed()


def removed_events(first_id: int, dp_rank: int, hashes: Sequence[int]) -> list[KvEvent]:
    """``KvEvent(first_id + i, dp_rank, RemovedBlocks((hashes[i],)))`` for every i: one
    ``Removed`` event per hash, with consecutive ids (one C-level map per field from
    ``_BULK_FROM`` hashes on)."""
    if _bulk_rm is not None and len(hashes) >= _BULK_FROM:
        return _bulk_rm(first_id, dp_rank, hashes)
    return [kv_event(first_id + i, dp_rank, removed_blocks((h,))) for i, h in enumerate(hashes)]


__all__ = ["is_plain", "kv_block", "kv_blocks", "kv_event", "maker", "removed_blocks",
           "removed_events", "stored_blocks"]
