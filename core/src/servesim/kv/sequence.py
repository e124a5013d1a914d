"""Known tokens of one request (prompt, then generated) and their chained block hashes.

Shared by every block-based backend. Generated tokens are never stored: token ``g`` is
``output_token_ids[g]`` when the request fixes its outputs, else the deterministic pseudo
token ``base + g`` with a per-request ``base`` below 2**31 (the reference draws random u32
ids, dynamo-mocker.md §2.5, so generated blocks are never shared across requests; servesim
stays reproducible). Tokens are materialised a block at a time, only when a block holding
them becomes full and needs its hash (§2.6, §3.1), so decoding costs no per-token objects.
"""

from __future__ import annotations

import sys
from array import array
from typing import Final

from xxhash import xxh3_64_intdigest

from servesim.contract import Request
from servesim.kv.adapter_hashes import adapter_root, adapter_sequence
from servesim.kv.event_records import ALL_SHARED
from servesim.kv.hashing import PAIR_STRUCT, SEED, local_block_hash, placeholder_hashes

_MASK32: Final = 0xFFFFFFFF
_MASK64: Final = 0xFFFFFFFFFFFFFFFF


def pseudo_token_base(request_id: int, salt: int = 0) -> int:
    """Per-request base of the pseudo tokens (a mixed, u32-safe value)."""
    return (((salt ^ request_id) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _MASK64) >> 33


#: ``n -> (ones, steps)``: the integers whose little-endian u32 lanes are all 1, and 0..n-1.
_LANES: dict[int, tuple[int, int]] = {}


def _lanes(n: int) -> tuple[int, int]:
    """``(ones, steps)`` for ``n`` u32 lanes: lane i of ``lo * ones + steps`` is ``lo + i``
    (:func:`_range_bytes`)."""
    lanes = _LANES.get(n)
    if lanes is None:
        lanes = _LANES[n] = (sum(1 << (32 * i) for i in range(n)),
                             sum(i << (32 * i) for i in range(n)))
    return lanes


def _range_bytes(lo: int, hi: int) -> bytes:
    """Little-endian u32 bytes of tokens ``lo .. hi-1`` (the layout local_block_hash hashes).

    While every token fits in 32 bits, lane i of ``lo * ones + steps`` is ``lo + i`` with no
    carry into the next lane, so one big-integer multiply and ``to_bytes`` give the bytes
    (several times faster than an array of the range)."""
    n = hi - lo
    if 0 <= lo and hi <= 0x100000000 and n > 0:
        ones, steps = _lanes(n)
        return (lo * ones + steps).to_bytes(4 * n, "little")
    data = array("I", range(lo, hi))
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        data.byteswap()
    return data.tobytes()


class SequenceBlocks:
    """Tokens and block hashes of ``prompt + generated`` for one request.

    ``seq``/``loc`` start as the prompt's cached hash lists (shared with the TokenSeq) and
    are copied on the first generated block, so prompts common to many requests are hashed
    once.
    """

    __slots__ = ("request", "prompt_len", "base", "seq", "loc", "_own", "root")

    def __init__(self, request: Request, salt: int = 0) -> None:
        self.request = request
        self.prompt_len = len(request.prompt)
        self.base = pseudo_token_base(request.request_id, salt)
        self.seq: list[int] = []
        self.loc: list[int] = []
        self._own = False
        # A LoRA request's chain starts from its adapter's root (servesim.kv.adapter_hashes).
        self.root: int | None = adapter_root(request.lora) if request.lora else None

    def load_prompt(self, block_size: int, elide: bool = False) -> None:
        """Share the prompt's cached full-block hashes (``elide``: the variant with
        placeholders for blocks no other request can share, TokenSeq.block_hashes_elided)."""
        if not self.seq:
            prompt = self.request.prompt
            if elide:
                self.seq, self.loc = prompt.block_hashes_elided(block_size)
            else:
                self.seq, self.loc = prompt.block_hashes(block_size)
            if self.root is not None and self.seq:
                self.seq = adapter_sequence(self.loc, self.request.lora, self.seq)

    def shared_blocks(self, block_size: int) -> int:
        """How many leading full blocks another request's prompt may hold too: those of the
        prompt that it may share (TokenSeq.shared_blocks), and with pseudo generated tokens
        none that holds one (no prompt holds this request's pseudo tokens, as the lazy
        hashing of generated blocks also relies on); with fixed outputs, every block."""
        if self.request.output_token_ids is not None:
            return ALL_SHARED
        return min(self.request.prompt.shared_blocks(block_size), self.prompt_len // block_size)

    def hashes(self, nblocks: int, block_size: int) -> tuple[list[int], list[int]]:
        """``(sequence_hashes, local_hashes)`` covering at least the first ``nblocks`` full
        blocks of the known tokens (the lists may be longer; callers slice)."""
        self.load_prompt(block_size)
        seq = self.seq
        if len(seq) >= nblocks:
            return seq, self.loc
        if not self._own:
            self.seq = seq = list(seq)
            self.loc = list(self.loc)
            self._own = True
        loc = self.loc
        parent = seq[-1] if seq else self.root
        if parent is not None and parent < 0:
            # After a placeholder (TokenSeq.block_hashes_elided) every later block is this
            # request's alone too: placeholders, never hashed.
            fake = placeholder_hashes(nblocks - len(seq))
            seq.extend(fake)
            loc.extend(fake)
            return seq, loc
        plen = self.prompt_len
        k = len(seq)
        if self.request.output_token_ids is None:
            # Blocks of pseudo tokens only: their bytes from one big-integer product each
            # (_range_bytes, inline), hashed and chained in one loop.
            first_pseudo = -(-plen // block_size)
            while k < nblocks and k < first_pseudo:
                parent = self._hash_block(k, block_size, parent)
                k += 1
            if k < nblocks:
                n = block_size
                ones, steps = _lanes(n)
                width = 4 * n
                g = self.base + k * n - plen
                if 0 <= g and g + (nblocks - k) * n <= 0x100000000:
                    pack = PAIR_STRUCT.pack
                    append_seq, append_loc = seq.append, loc.append
                    for g0 in range(g, g + (nblocks - k) * n, n):
                        h = xxh3_64_intdigest((g0 * ones + steps).to_bytes(width, "little"), SEED)
                        parent = h if parent is None else xxh3_64_intdigest(pack(parent, h), SEED)
                        append_seq(parent)
                        append_loc(h)
                    return seq, loc
        while k < nblocks:
            parent = self._hash_block(k, block_size, parent)
            k += 1
        return seq, loc

    def _hash_block(self, k: int, block_size: int, parent: int | None) -> int:
        """Append block ``k``'s sequence and local hashes (after ``parent``); its sequence
        hash."""
        start = k * block_size
        plen = self.prompt_len
        end = start + block_size
        if self.request.output_token_ids is None and start >= plen:
            g0 = self.base + start - plen
            h = xxh3_64_intdigest(_range_bytes(g0, g0 + block_size), SEED)
        elif (self.request.output_token_ids is None and end > plen
              and 0 <= self.base and self.base + end - plen <= 0x100000000):
            # The block where the prompt ends and pseudo tokens begin: its bytes from the
            # prompt's and the pseudo range's, with no token list (the same bytes
            # local_block_hash builds from self.tokens(start, end)).
            h = xxh3_64_intdigest(self.request.prompt.token_bytes(start, plen)
                                  + _range_bytes(self.base, self.base + end - plen), SEED)
        else:
            h = local_block_hash(self.tokens(start, end))
        # servesim.kv.hashing.chain_hash, inline
        parent = h if parent is None else xxh3_64_intdigest(PAIR_STRUCT.pack(parent, h), SEED)
        self.seq.append(parent)
        self.loc.append(h)
        return parent

    def tokens(self, start: int, end: int) -> list[int]:
        """Known tokens ``[start, end)`` (prompt, then generated)."""
        plen = self.prompt_len
        out = self.request.prompt.tokens(start, min(end, plen)) if start < plen else []
        g0 = max(start, plen) - plen
        g1 = end - plen
        if g1 > g0:
            fixed = self.request.output_token_ids
            if fixed is not None:
                out.extend(t & _MASK32 for t in fixed[g0:g1])
            else:
                out.extend(range(self.base + g0, self.base + g1))
        return out


__all__ = ["SequenceBlocks", "pseudo_token_base"]
