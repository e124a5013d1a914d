"""Per-request token and hash bookkeeping (servesim_vllm.request)."""

from __future__ import annotations

from servesim.contract import Request
from servesim.kv.hashing import chain_hash, local_block_hash
from servesim.tokens import RepeatedBlockTokens, Tokens
from servesim_vllm.request import VllmRequest


def _chained(tokens: list[int], bs: int) -> list[int]:
    out, parent = [], None
    for k in range(len(tokens) // bs):
        parent = chain_hash(parent, local_block_hash(tokens[k * bs:(k + 1) * bs]))
        out.append(parent)
    return out


def test_generated_block_hashes_chain_over_prompt_and_pseudo_tokens() -> None:
    r = VllmRequest(Request(5, Tokens(range(6)), 20), None)
    r.load_prompt_hashes(4)
    r.length, r.generated = 18, 12
    r.ensure_hashes(4, 4)
    toks = r.tokens(0, 16)
    assert toks[:6] == list(range(6))
    assert r.seq == _chained(toks, 4)
    # The prompt's own cached hash list is left untouched (it is shared).
    assert r.request.prompt.block_hashes(4)[0] == r.seq[:1]


def test_pseudo_tokens_differ_between_requests_and_fixed_outputs_win() -> None:
    a = VllmRequest(Request(1, Tokens([9] * 4), 8), None)
    b = VllmRequest(Request(2, Tokens([9] * 4), 8), None)
    assert a.tokens(4, 8) != b.tokens(4, 8)
    assert all(0 <= t < 2**32 for t in a.tokens(4, 12))
    c = VllmRequest(Request(3, Tokens([9] * 4), 8, output_token_ids=(1, 2, 3)), None)
    assert c.tokens(2, 7) == [9, 9, 1, 2, 3]
    c.load_prompt_hashes(2)
    c.length, c.generated = 7, 3
    c.ensure_hashes(3, 2)
    assert c.seq == _chained([9, 9, 9, 9, 1, 2], 2)


def test_max_model_len_caps_planned_outputs() -> None:
    prompt = RepeatedBlockTokens([1, 2], 4, 6)
    assert VllmRequest(Request(1, prompt, 100), 10).max_out == 4
    assert VllmRequest(Request(1, prompt, 100), None).max_out == 100
    assert VllmRequest(Request(1, prompt, 100), 6).max_out == 0
