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


def test_batched_prompts_hash_as_each_alone() -> None:
    """batch_prompt_hashes: the first block_hashes call of a batch caches every member's (the
    chains computed together), with the values and list types each prompt gets alone; a
    block size the trace block size is no multiple of, and a prompt asked again after
    forgetting, take the prompt's own path."""
    import random

    from servesim.tokens import RepeatedBlockTokens, batch_prompt_hashes

    rng = random.Random(5)

    def prompts() -> list[RepeatedBlockTokens]:
        r = random.Random(11)
        out = []
        for _ in range(40):
            ids = [r.choice((r.getrandbits(64), r.randrange(50), -r.randrange(9))) for _ in range(r.randrange(6))]
            out.append(RepeatedBlockTokens(ids, 16, r.randrange(0, 16 * len(ids) + 1) if ids else 0))
        return out

    for block_size in (1, 4, 16, 5):
        alone, batched = prompts(), prompts()
        assert batch_prompt_hashes(batched, size=16) == 40
        order = list(range(40))
        rng.shuffle(order)
        for i in order:
            got = batched[i].block_hashes(block_size)
            assert got == alone[i].block_hashes(block_size)
            assert type(got[0]) is list and all(type(h) is int for h in got[0] + got[1])
        assert all(p.hash_batch is None for p in batched)
        batched[3].forget_block_hashes()
        assert batched[3].block_hashes(block_size) == alone[3].block_hashes(block_size)
