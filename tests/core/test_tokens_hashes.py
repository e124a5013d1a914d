"""An explicit token list's block hashes (Tokens._local_hashes hashes one array of the whole
prompt) are the block-by-block ``local_block_hash`` of every full block, tokens outside
``[0, 2**32)`` (hashed by their low 32 bits) included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from servesim.kv.hashing import local_block_hash, sequence_hashes
from servesim.tokens import Tokens

TOKENS = st.lists(st.one_of(st.integers(0, 2**32 - 1), st.integers(-2**40, 2**40)), max_size=90)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(TOKENS, st.integers(1, 17))
def test_block_hashes_are_the_blocks_local_hashes(tokens: list[int], block_size: int) -> None:
    n = len(tokens) // block_size
    local = [local_block_hash(tokens[i * block_size:(i + 1) * block_size]) for i in range(n)]
    assert Tokens(tokens).block_hashes(block_size) == (sequence_hashes(local), local)


def test_tokens_are_ints() -> None:
    seq = Tokens((3, 4.0, True))  # type: ignore[arg-type]
    assert seq.tokens() == [3, 4, 1] and all(type(t) is int for t in seq.tokens())
    assert Tokens([2**32, 7]).block_hashes(1)[1] == [local_block_hash([0]), local_block_hash([7])]


def test_a_list_of_ints_is_copied_as_it_is() -> None:
    ids = [5, 6, 7]
    seq = Tokens(ids, ints=True)
    ids.append(8)
    assert seq.tokens() == [5, 6, 7] and seq.block_hashes(3) == Tokens((5, 6, 7)).block_hashes(3)


def test_repeated_block_tokens_hash_their_tokens() -> None:
    """RepeatedBlockTokens' trace-block shortcut (one local hash per trace block, repeated for
    each engine block in it) equals hashing each block's tokens."""
    from servesim.tokens import RepeatedBlockTokens

    ids = [7, 2**40 + 3, 0, 2**32 - 1, 12]
    for block_size in (1, 2, 4, 8):
        for length in (0, 3, 8, 13, 31, 40):
            seq = RepeatedBlockTokens(ids, 8, length)
            n = length // block_size
            local = [local_block_hash(seq.tokens(i * block_size, (i + 1) * block_size)) for i in range(n)]
            assert seq.block_hashes(block_size) == (sequence_hashes(local), local)
