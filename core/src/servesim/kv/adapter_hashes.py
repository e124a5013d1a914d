"""Block hashes of a LoRA request: the adapter is part of every block's hash.

vLLM adds a LoRA request's adapter to every block hash as an extra key
(``_gen_lora_extra_hash_keys`` in vllm/v1/core/kv_cache_utils.py, v0.32), so equal tokens under
different adapters (or under an adapter and the base model) never share KV. servesim chains a
LoRA request's sequence hashes from an adapter root instead of from nothing: block 0's is
``chain_hash(root, local_0)`` with ``root = xxh3_64(b"lora" + LE u64 id, seed=1337)`` (the
id's low 64 bits), and
every later block chains after it as usual (servesim.kv.hashing). Local hashes stay token-only
(they are the events' ``tokens_hash``). A base-model request (``lora`` 0) keeps its hashes
exactly; placeholders (``placeholder_hashes``) stay placeholders, being unique already.
"""

from __future__ import annotations

import struct
from typing import Any

from xxhash import xxh3_64_intdigest

from servesim.kv.hashing import PAIR_STRUCT, SEED

_ROOTS: dict[int, int] = {}
_MASK64 = 0xFFFFFFFFFFFFFFFF


def adapter_root(lora: int) -> int:
    """The parent hash of a LoRA request's first block."""
    root = _ROOTS.get(lora)
    if root is None:
        root = _ROOTS[lora] = xxh3_64_intdigest(b"lora" + struct.pack("<Q", lora & _MASK64), SEED)
    return root


def adapter_sequence(local: list[int], lora: int, seq: list[int]) -> list[int]:
    """The sequence hashes of local hashes ``local`` under adapter ``lora``; entries where
    ``seq`` (the base-model chain) holds a placeholder keep it."""
    out: list[int] = []
    parent = adapter_root(lora)
    pack = PAIR_STRUCT.pack
    for i, h in enumerate(local):
        if seq[i] < 0:
            out.extend(seq[i:])
            break
        parent = xxh3_64_intdigest(pack(parent, h), SEED)
        out.append(parent)
    return out


def prompt_hashes(prompt: Any, block_size: int, lora: int) -> list[int]:
    """A prompt's (a servesim.tokens.TokenSeq) sequence hashes as a router scores them
    (elided, as ``TokenSeq.block_hashes_elided``) for a request of adapter ``lora``."""
    seq, local = prompt.block_hashes_elided(block_size)
    if not lora:
        return seq
    return adapter_sequence(local, lora, seq)


__all__ = ["adapter_root", "adapter_sequence", "prompt_hashes"]
