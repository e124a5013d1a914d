"""The byte and hash shortcuts of prompt and straddling blocks equal their definitions:
``TokenSeq.token_bytes`` is the u32 array of the tokens mod 2**32, ``repeated_token_hashes``
is ``local_block_hash`` of each token repeated, ``RepeatedBlockTokens``' local hashes (one a
trace block, spread by slice assignment) are each block's hash of its tokens, and the block
where a prompt ends and pseudo tokens begin hashes its tokens."""

from __future__ import annotations

import sys
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.contract import Request
from servesim.kv.hashing import chain_hash, local_block_hash, repeated_token_hash, repeated_token_hashes
from servesim.kv.sequence import SequenceBlocks
from servesim.tokens import RepeatedBlockTokens, Tokens, TokenSeq

IDS = st.lists(st.one_of(st.integers(0, 2**32 - 1), st.integers(-2**40, 2**70)), max_size=12)


def _u32(tokens: list[int]) -> bytes:
    data = array("I", [t & 0xFFFFFFFF for t in tokens])
    assert data.itemsize == 4
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        data.byteswap()
    return data.tobytes()


@settings(max_examples=300, derandomize=True, deadline=None)
@given(ids=IDS, tb=st.integers(1, 9), cut=st.integers(0, 120), lo=st.integers(-3, 120),
       span=st.integers(0, 40))
def test_token_bytes_are_the_u32_array_of_the_tokens(ids: list[int], tb: int, cut: int, lo: int,
                                                    span: int) -> None:
    seq = RepeatedBlockTokens(ids, tb, cut)
    want = _u32(seq.tokens(lo, lo + span))
    assert seq.token_bytes(lo, lo + span) == want
    assert TokenSeq.token_bytes(seq, lo, lo + span) == want  # the generic path
    toks = Tokens(seq.tokens() + [-5, 2**33 + 1])
    assert toks.token_bytes(lo, lo + span) == _u32(toks.tokens(lo, lo + span))


@settings(max_examples=200, derandomize=True, deadline=None)
@given(tokens=st.lists(st.integers(0, 2**32 - 1), max_size=20), count=st.integers(1, 70))
def test_repeated_token_hashes_hash_each_token_repeated(tokens: list[int], count: int) -> None:
    want = [local_block_hash([t] * count) for t in tokens]
    assert repeated_token_hashes(tokens, count) == want
    assert repeated_token_hashes(tuple(tokens), count) == want  # from the memo now
    assert [repeated_token_hash(t, count) for t in tokens] == want


@settings(max_examples=200, derandomize=True, deadline=None)
@given(ids=IDS, per=st.integers(1, 5), bs=st.integers(1, 6), cut=st.integers(0, 400))
def test_trace_block_local_hashes_are_each_blocks_hash(ids: list[int], per: int, bs: int,
                                                       cut: int) -> None:
    seq = RepeatedBlockTokens(ids, per * bs, cut)
    n = len(seq) // bs
    want = [local_block_hash(seq.tokens(i * bs, (i + 1) * bs)) for i in range(n)]
    assert seq._local_hashes(bs) == want  # noqa: SLF001
    assert TokenSeq._local_hashes(seq, bs) == want  # noqa: SLF001 - the generic path
    for m in range(min(n, 4)):
        assert seq._local_hashes(bs, m) == want[:m]  # noqa: SLF001


@settings(max_examples=200, derandomize=True, deadline=None)
@given(ids=IDS, tb=st.integers(1, 8), bs=st.integers(1, 8), cut=st.integers(0, 90),
       out=st.integers(1, 40), rid=st.integers(0, 2**40), salt=st.integers(0, 3))
def test_every_block_hashes_its_tokens(ids: list[int], tb: int, bs: int, cut: int, out: int,
                                       rid: int, salt: int) -> None:
    prompt = RepeatedBlockTokens(ids, tb, cut)
    for p in (prompt, Tokens(prompt.tokens())):
        sb = SequenceBlocks(Request(rid, p, out), salt)
        n = (len(p) + out) // bs
        seq, loc = sb.hashes(n, bs)
        parent = None
        for k in range(n):
            local = local_block_hash(sb.tokens(k * bs, (k + 1) * bs))
            parent = chain_hash(parent, local)
            assert (loc[k], seq[k]) == (local, parent)
