"""Chained block hashes of many prompts at once, with numpy (same values as
:func:`servesim.kv.hashing.sequence_hashes`; kept out of the compiled modules and imported only
when a replay's sinks need every prompt's real hashes)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from servesim.kv.hashing import SEED


# Vectorised chaining (many prompts at once). For a 16-byte input, xxHash's XXH3 64-bit hash
# is its 9-16 byte path (xxHash specification, "XXH3 algorithm overview", len 9-16):
#   bitflip1 = (secret[24:32] ^ secret[32:40]) + seed      (little-endian u64 words of the
#   bitflip2 = (secret[40:48] ^ secret[48:56]) - seed       default 192-byte secret, kSecret)
#   lo = first 8 bytes ^ bitflip1, hi = last 8 bytes ^ bitflip2
#   acc = len + byteswap64(lo) + hi + fold64(lo * hi)   (fold64: low ^ high half of the
#                                                        128-bit product), all mod 2**64
#   h = avalanche(acc): acc ^= acc >> 37; acc *= 0x165667919E3779F9; acc ^= acc >> 32
# A chain step hashes pack("<QQ", parent, local), so lo and hi are parent and local.
# tests/kv/test_hash_vector.py checks it bit for bit against xxh3_64_intdigest.
_SECRET_24_56 = bytes.fromhex("7240a4a4b7b3671f" "cb79e64eccc0e578" "825ad07dccff7221" "b8084674f743248e")
_S24, _S32, _S40, _S48 = struct.unpack("<4Q", _SECRET_24_56)
_BITFLIP1 = ((_S24 ^ _S32) + SEED) & 0xFFFFFFFFFFFFFFFF
_BITFLIP2 = ((_S40 ^ _S48) - SEED) & 0xFFFFFFFFFFFFFFFF
_AVALANCHE = 0x165667919E3779F9


def chain_hash_many(parents: np.ndarray, locals_: np.ndarray) -> np.ndarray:
    """``chain_hash(parents[i], locals_[i])`` for every ``i`` (two ``uint64`` arrays of one
    shape; parents not None), with numpy's wrapping ``uint64`` arithmetic."""
    u = np.uint64
    lo = parents ^ u(_BITFLIP1)
    hi = locals_ ^ u(_BITFLIP2)
    m32, s32 = u(0xFFFFFFFF), u(32)
    a0, a1, b0, b1 = lo & m32, lo >> s32, hi & m32, hi >> s32
    p00, p10 = a0 * b0, a1 * b0
    cross = (p00 >> s32) + (p10 & m32) + a0 * b1  # < 2**64: no carry is lost
    high = a1 * b1 + (p10 >> s32) + (cross >> s32)
    low = (cross << s32) | (p00 & m32)
    acc = lo.byteswap() + hi + (low ^ high) + u(16)
    acc ^= acc >> u(37)
    acc *= u(_AVALANCHE)
    acc ^= acc >> s32
    return acc


def repeated_block_hashes_many(
    block_locals: Sequence[Sequence[int]], nblocks: Sequence[int], per: int
) -> list[tuple[list[int], list[int]]]:
    """``(sequence_hashes, local_hashes)`` of prompts whose engine blocks come ``per`` to a
    trace block (servesim.tokens.RepeatedBlockTokens): prompt ``i`` has ``nblocks[i]`` full
    blocks, and ``block_locals[i]`` holds the local hash of each of its trace blocks (at least
    ``ceil(nblocks[i] / per)``), which its ``per`` engine blocks share.

    One table holds every prompt's block locals (a column a prompt, longest first, gathered
    from the flat trace-block hashes); the chain runs down it one block position at a time
    over the prompts still that long, and the valid cells are read back prompt by prompt."""
    g = len(nblocks)
    order = sorted(range(g), key=nblocks.__getitem__, reverse=True)
    out: list[Any] = [None] * g
    while order and nblocks[order[-1]] <= 0:
        out[order.pop()] = ([], [])
    if not order:
        return out
    n = np.array([nblocks[i] for i in order], dtype=np.int64)
    used = [-(-nblocks[i] // per) for i in order]
    flat = np.array([h for i, m in zip(order, used) for h in block_locals[i][:m]], dtype=np.uint64)
    starts = np.zeros(len(order), dtype=np.int64)
    np.cumsum(used[:-1], out=starts[1:])
    width = int(n[0])
    pos = np.arange(width, dtype=np.int64)[:, None]
    valid = pos < n[None, :]
    table = flat[np.where(valid, starts[None, :] + pos // per, 0)]  # (width, prompts)
    locs = table.T[valid.T].tolist()  # prompt by prompt, block by block
    # live[j]: how many prompts have more than j blocks (a leading slice of the columns).
    live = np.searchsorted(-n, -np.arange(1, width + 1), side="right")
    for j in range(1, width):
        k = int(live[j])
        if k == 0:
            break
        table[j, :k] = chain_hash_many(table[j - 1, :k], table[j, :k])
    seqs = table.T[valid.T].tolist()
    at = 0
    for i, m in zip(order, n.tolist()):
        out[i] = (seqs[at:at + m], locs[at:at + m])
        at += m
    return out
