"""The token bytes a generated block hashes (servesim.kv.sequence._range_bytes) are exactly
the little-endian u32 array of its tokens, on both of its paths, and chained block hashes of
``SequenceBlocks`` are the chain of local block hashes of its tokens."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import Request
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.kv.sequence import SequenceBlocks, _range_bytes
from servesim.tokens import Tokens


@settings(max_examples=500, derandomize=True)
@given(n=st.integers(1, 300), lo=st.integers(0, 2**32 - 1))
def test_range_bytes_are_the_u32_array_of_the_range(n: int, lo: int) -> None:
    lo = min(lo, 2**32 - n)
    want = array("I", range(lo, lo + n))
    assert want.itemsize == 4
    assert _range_bytes(lo, lo + n) == want.tobytes()


def test_tokens_past_32_bits_are_refused_as_the_array_refuses_them() -> None:
    with pytest.raises(OverflowError):
        _range_bytes(2**32 - 1, 2**32 + 1)
    assert _range_bytes(5, 5) == b""


def test_generated_block_hashes_chain_the_local_hashes_of_their_tokens() -> None:
    req = Request(request_id=3, prompt=Tokens(list(range(100, 140))), max_output_tokens=200)
    sb = SequenceBlocks(req)
    seq, loc = sb.hashes(6, 16)
    parent = None
    for k in range(6):
        local = local_block_hash(sb.tokens(16 * k, 16 * k + 16))
        parent = chain_hash(parent, local)
        assert (loc[k], seq[k]) == (local, parent)


def _masked_hash(tokens: list[int]) -> int:
    """The definition: xxh3_64 of the little-endian u32 bytes of every token mod 2**32."""
    from servesim.kv.hashing import SEED
    from xxhash import xxh3_64_intdigest
    return xxh3_64_intdigest(b"".join((t & 0xFFFFFFFF).to_bytes(4, "little") for t in tokens),
                             seed=SEED)


@settings(max_examples=300, derandomize=True)
@given(tokens=st.lists(st.one_of(st.integers(0, 2**32 - 1), st.integers(-2**40, 2**70)),
                       max_size=70))
def test_local_block_hash_takes_every_token_mod_2_32(tokens: list[int]) -> None:
    want = _masked_hash(tokens)
    assert local_block_hash(tokens) == want
    assert local_block_hash(tuple(tokens)) == want
    assert local_block_hash(iter(tokens)) == want  # type: ignore[arg-type]
