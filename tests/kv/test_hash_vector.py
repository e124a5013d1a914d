"""The vectorised chain step (servesim.kv.hash_vector) is xxh3_64 of the packed pair, bit for
bit, and chaining many prompts at once gives each prompt's sequence_hashes."""

from __future__ import annotations

import random
import struct

import numpy as np
from servesim.kv.hash_vector import chain_hash_many, repeated_block_hashes_many
from servesim.kv.hashing import SEED, chain_hash, sequence_hashes
from xxhash import xxh3_64_intdigest

EDGES = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 0x0123456789ABCDEF]


def test_a_chain_step_is_xxh3_of_the_packed_pair() -> None:
    rng = random.Random(21)
    parents = [rng.getrandbits(64) for _ in range(20_000)] + [a for a in EDGES for _ in EDGES]
    locals_ = [rng.getrandbits(rng.choice((8, 32, 64))) for _ in range(20_000)] + EDGES * len(EDGES)
    got = chain_hash_many(np.array(parents, dtype=np.uint64), np.array(locals_, dtype=np.uint64))
    want = [xxh3_64_intdigest(struct.pack("<QQ", p, h), SEED) for p, h in zip(parents, locals_)]
    assert got.tolist() == want
    assert want[:3] == [chain_hash(p, h) for p, h in zip(parents[:3], locals_[:3])]


def test_repeated_blocks_chain_as_sequence_hashes_does() -> None:
    rng = random.Random(3)
    for per in (1, 2, 8):
        counts = [rng.choice((0, 1, 3, 9, 40)) for _ in range(200)]
        ids = [[rng.getrandbits(64) for _ in range(c)] for c in counts]
        nblocks = [max(0, c * per - rng.randrange(per)) if c else 0 for c in counts]
        got = repeated_block_hashes_many(ids, nblocks, per)
        for row, n, (seq, loc) in zip(ids, nblocks, got):
            want_loc = [row[j // per] for j in range(n)]
            assert loc == want_loc and seq == sequence_hashes(want_loc)
    assert repeated_block_hashes_many([], [], 4) == []
