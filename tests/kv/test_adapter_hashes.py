"""A LoRA request's block hashes chain from its adapter's root (servesim.kv.adapter_hashes):
base-model hashes are unchanged, every block of an adapter's request differs from the base
model's and from other adapters', and routers score the same hashes the rank caches."""

from __future__ import annotations

from servesim.contract import Request
from servesim.kv.adapter_hashes import adapter_root, adapter_sequence, prompt_hashes
from servesim.kv.hashing import chain_hash, local_block_hash, sequence_hashes
from servesim.kv.sequence import SequenceBlocks
from servesim.tokens import RepeatedBlockTokens, Tokens

BS = 4
PROMPT = Tokens(list(range(100, 118)))  # 4 full blocks and 2 tokens


def _blocks(lora: int, prompt: Tokens = PROMPT, out: int = 12) -> SequenceBlocks:
    return SequenceBlocks(Request(7, prompt, out, lora=lora))


def test_the_base_model_keeps_its_hashes() -> None:
    seq, loc = _blocks(0).hashes(6, BS)
    local = [local_block_hash(_blocks(0).tokens(i * BS, (i + 1) * BS)) for i in range(6)]
    assert loc[:6] == local and seq[:6] == sequence_hashes(local)
    assert prompt_hashes(PROMPT, BS, 0) == PROMPT.block_hashes_elided(BS)[0]


def test_an_adapter_chains_every_block_from_its_root() -> None:
    base_seq, base_loc = _blocks(0).hashes(6, BS)
    seq, loc = _blocks(3).hashes(6, BS)
    assert loc[:6] == base_loc[:6]  # token-only local hashes (the events' tokens_hash)
    parent = adapter_root(3)
    for i in range(6):
        parent = chain_hash(parent, loc[i])
        assert seq[i] == parent != base_seq[i]
    other = _blocks(4).hashes(6, BS)[0]
    assert not set(other[:6]) & set(seq[:6])
    assert seq[:4] == prompt_hashes(PROMPT, BS, 3)  # what a router scores


def test_a_prompt_shorter_than_a_block_chains_its_first_generated_block_from_the_root() -> None:
    short = Tokens([5, 6])
    base = _blocks(0, short).hashes(2, BS)
    lora = _blocks(2, short).hashes(2, BS)
    assert lora[1] == base[1]
    assert lora[0][0] == chain_hash(adapter_root(2), base[1][0]) != base[0][0]


def test_placeholders_stay_placeholders() -> None:
    prompt = RepeatedBlockTokens([1, 2, 3, 4], 4, 16)
    prompt.unique_from = 4  # blocks from the second on are this request's alone
    seq, loc = prompt.block_hashes_elided(BS)
    assert seq[0] >= 0 and all(h < 0 for h in seq[1:])
    salted = adapter_sequence(loc, 5, seq)
    assert salted[0] == chain_hash(adapter_root(5), loc[0]) and salted[1:] == seq[1:]
