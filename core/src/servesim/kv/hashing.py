"""Chained block hashes, as Dynamo's mocker and KV router compute them.

dynamo-mocker.md §3.1: a block's local hash is ``xxh3_64(LE u32 tokens, seed=1337)``; block 0's
sequence hash is its local hash, block i's is ``xxh3_64(LE u64 [parent_seq_hash, local_hash],
seed=1337)``. Two sequences share block i only when blocks 0..i hold equal tokens, so a router
indexing these hashes sees the same identities the reference emits.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import ClassVar, Final

from xxhash import xxh3_64_intdigest

SEED: Final = 1337
#: Two u64 little-endian, packed where the platform allows with native ``unsigned long``:
#: the same 16 bytes as ``"<QQ"`` where ``long`` is 8 bytes and little-endian, converted from
#: an int by a cheaper routine than ``"Q"``'s (CPython 3.11 turns each ``"Q"`` value into its
#: bytes through a generic byte-array conversion), refusing the same values.
PAIR_STRUCT = struct.Struct("LL")
if PAIR_STRUCT.size != 16 or PAIR_STRUCT.pack(0x0102030405060708, 2**64 - 1) != struct.pack(
        "<QQ", 0x0102030405060708, 2**64 - 1):  # pragma: no cover - 4-byte long or big endian
    PAIR_STRUCT = struct.Struct("<QQ")
U32_STRUCT = struct.Struct("<I")
_MASK32: Final = 0xFFFFFFFF
#: ``count -> {token: local hash of count copies of token}``, for repeated_token_hash(es).
_repeat_cache: dict[int, dict[int, int]] = {}
_REPEAT_CACHE_MAX: Final = 4_000_000  # entries of one count's memo


_BIG_ENDIAN = struct.pack("=I", 1) != struct.pack("<I", 1)


def local_block_hash(tokens: Sequence[int]) -> int:
    """Token-only hash of one block's tokens (each taken modulo 2**32)."""
    data: array[int] | None = None
    if type(tokens) is list or type(tokens) is tuple:
        try:
            # Tokens already in [0, 2**32) (the usual case) are their own low 32 bits: the
            # array takes them as they are, and refuses any other value.
            data = array("I", tokens)
        except (OverflowError, TypeError):
            data = None
    if data is None:
        data = array("I", [t & _MASK32 for t in tokens])
    if data.itemsize != 4:  # pragma: no cover - exotic platforms
        raise RuntimeError("array('I') is not 32-bit on this platform")
    if _BIG_ENDIAN:  # pragma: no cover - big endian
        data.byteswap()
    return xxh3_64_intdigest(data.tobytes(), SEED)


def _repeat_memo(count: int) -> dict[int, int]:
    memo = _repeat_cache.get(count)
    if memo is None:
        memo = _repeat_cache[count] = {}
    return memo


def repeated_token_hash(token: int, count: int) -> int:
    """Local hash of a block made of ``count`` copies of one token (memoised)."""
    memo = _repeat_memo(count)
    h = memo.get(token)
    if h is None:
        # Same bytes as local_block_hash([token] * count), built without a per-token list.
        h = xxh3_64_intdigest(U32_STRUCT.pack(token & _MASK32) * count, SEED)
        if len(memo) < _REPEAT_CACHE_MAX:
            memo[token] = h
    return h


def repeated_token_hashes(tokens: Sequence[int], count: int) -> list[int]:
    """:func:`repeated_token_hash` of each token in ``tokens`` (each in ``[0, 2**32)``): the
    memo is read for all of them in one C-level map (keyed by the int alone, no key tuple),
    and only the misses are hashed."""
    memo = _repeat_memo(count)
    out: list[int | None] = list(map(memo.get, tokens))
    if None in out:
        room = len(memo) < _REPEAT_CACHE_MAX
        pack = U32_STRUCT.pack
        for i, h in enumerate(out):
            if h is None:
                t = tokens[i]
                h = out[i] = xxh3_64_intdigest(pack(t) * count, SEED)
                if room:
                    memo[t] = h
    return out  # type: ignore[return-value]  # every None was replaced


def local_block_hashes(tokens: Sequence[int], block_size: int, n: int) -> list[int]:
    """:func:`local_block_hash` of each of the first ``n`` full blocks of ``tokens`` (a list
    or tuple), from one array of all their tokens while every one is in ``[0, 2**32)``; any
    other token (whose low 32 bits are hashed) takes the block-by-block path."""
    try:
        data = array("I", tokens[: n * block_size])
    except (OverflowError, TypeError):
        data = None
    if data is None or data.itemsize != 4:
        return [local_block_hash(tokens[i * block_size:(i + 1) * block_size]) for i in range(n)]
    if _BIG_ENDIAN:  # pragma: no cover - big endian
        data.byteswap()
    raw = data.tobytes()
    width = 4 * block_size
    return [xxh3_64_intdigest(raw[i * width:(i + 1) * width], SEED) for i in range(n)]


def chain_hash(parent: int | None, local: int) -> int:
    """Sequence hash of a block given its parent's sequence hash (None for block 0)."""
    if parent is None:
        return local
    return xxh3_64_intdigest(PAIR_STRUCT.pack(parent, local), SEED)


class _PlaceholderCounter:
    next: ClassVar[int] = 1


def placeholder_hashes(n: int) -> list[int]:
    """``n`` fresh placeholder hashes: distinct negative ints, never a real (u64) hash and
    never handed out twice in this process. They stand in for the hashes of blocks nothing
    outside their own request can ever look up or observe (no other request can hold the same
    tokens, and no event carries them), so their values are never part of any output."""
    start = _PlaceholderCounter.next
    _PlaceholderCounter.next = start + n
    return list(range(-start, -start - n, -1))


def sequence_hashes(local_hashes: Sequence[int], parent: int | None = None) -> list[int]:
    """Chain a run of local hashes after ``parent`` (:func:`chain_hash` of each in turn)."""
    out: list[int] = []
    if not local_hashes:
        return out
    it = iter(local_hashes)
    if parent is None:
        parent = next(it)
        out.append(parent)
    pack = PAIR_STRUCT.pack
    append = out.append
    for local in it:
        parent = xxh3_64_intdigest(pack(parent, local), SEED)
        append(parent)
    return out
