"""Token sequences that can be hashed into blocks without being materialised.

A replayed Mooncake trace names its prompt by hash ids (one per ``trace_block_size`` tokens);
:class:`RepeatedBlockTokens` keeps just those ids, yields tokens on demand, and computes block
hashes through a memoised fast path when every engine block lies inside one trace block
(dynamo-mocker.md §9.1, "Token synthesis": hash id ``h`` becomes ``trace_block_size`` copies
of token ``h``).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Sequence
from typing import Final

from servesim.kv.hashing import (
    U32_STRUCT,
    local_block_hash,
    local_block_hashes,
    placeholder_hashes,
    repeated_token_hashes,
    sequence_hashes,
)

_MASK32: Final = 0xFFFFFFFF


class TokenSeq(ABC):
    """A prompt: a length, tokens on demand, and cached per-block-size hashes (the cache
    exists only while it holds some: a trace keeps every prompt, most of them not in flight)."""

    __slots__ = ("_hash_cache",)

    def __init__(self) -> None:
        self._hash_cache: dict[int, tuple[list[int], list[int]]] | None = None

    def _cache(self) -> dict[int, tuple[list[int], list[int]]]:
        """The hash cache, made on first use."""
        cache = self._hash_cache
        if cache is None:
            cache = self._hash_cache = {}
        return cache

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def tokens(self, start: int = 0, end: int | None = None) -> list[int]:
        """Tokens ``[start, end)`` as a list."""

    def token_bytes(self, start: int, end: int) -> bytes:
        """Tokens ``[start, end)``, each modulo 2**32, as the little-endian u32 bytes that
        servesim.kv.hashing.local_block_hash hashes."""
        data = array("I", [t & _MASK32 for t in self.tokens(start, end)])
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            data.byteswap()
        return data.tobytes()

    def _local_hashes(self, block_size: int, n: int | None = None) -> list[int]:
        """Local hashes of the first ``n`` (default: every) full blocks."""
        if n is None:
            n = len(self) // block_size
        return [
            local_block_hash(self.tokens(i * block_size, (i + 1) * block_size)) for i in range(n)
        ]

    def block_hashes(self, block_size: int) -> tuple[list[int], list[int]]:
        """``(sequence_hashes, local_hashes)`` of every *full* block, cached per block size."""
        cache = self._hash_cache
        cached = None if cache is None else cache.get(block_size)
        if cached is None:
            local = self._local_hashes(block_size)
            cached = (sequence_hashes(local), local)
            self._cache()[block_size] = cached
        return cached

    def block_hashes_elided(self, block_size: int) -> tuple[list[int], list[int]]:
        """:meth:`block_hashes`, where blocks that no other request of the workload can share
        may carry unique negative placeholders instead (see :class:`RepeatedBlockTokens`)."""
        return self.block_hashes(block_size)

    def shared_blocks(self, block_size: int) -> int:
        """How many leading full blocks another request of the workload may hold too (the
        rest are :meth:`block_hashes_elided`'s placeholders): every one, unless a subclass
        knows better."""
        return len(self) // block_size

    def forget_block_hashes(self) -> None:
        """Drop the cached hashes (recomputed identically if asked again). A replay calls
        this when a request ends, so finished prompts keep no hash lists (docs/architecture.md, "Speed by design")."""
        self._hash_cache = None


class Tokens(TokenSeq):
    """An explicit token list."""

    __slots__ = ("_tokens",)

    def __init__(self, tokens: Sequence[int], ints: bool = False) -> None:
        """``ints``: every token is already an ``int`` (they are copied, not converted)."""
        super().__init__()
        self._tokens = list(tokens) if ints else list(map(int, tokens))

    def __len__(self) -> int:
        return len(self._tokens)

    def _local_hashes(self, block_size: int, n: int | None = None) -> list[int]:
        """From one array of the whole prompt (servesim.kv.hashing.local_block_hashes)."""
        if n is None:
            n = len(self._tokens) // block_size
        return local_block_hashes(self._tokens, block_size, n)

    def tokens(self, start: int = 0, end: int | None = None) -> list[int]:
        return self._tokens[start:end]

    def __repr__(self) -> str:
        return f"Tokens(len={len(self._tokens)})"


def _compact_ids(hash_ids: Sequence[int]) -> Sequence[int]:
    """Hash ids as 8-byte integers in one array (a tuple of int objects takes about four
    times the memory: a long trace keeps every prompt's ids), or a tuple when one does not
    fit in 64 signed bits."""
    try:
        return array("q", hash_ids)
    except (OverflowError, TypeError):
        return tuple(map(int, hash_ids))


class RepeatedBlockTokens(TokenSeq):
    """Hash id ``h`` stands for ``trace_block_size`` copies of token ``h``; cut to ``length``.

    ``unique_from`` (set by :func:`servesim.workload.model.mark_unique_prompts`, else None) is
    the first token of this prompt's first trace block whose token value no other trace block
    of the workload holds, with at least two of its tokens in the prompt. No other request's
    known tokens can then equal this prompt's first ``unique_from + 2`` tokens: another
    prompt would need that token value at the same position, and generated (pseudo) tokens
    never repeat a value twice in a row. Every block ending at or after that point is
    therefore this request's alone (:meth:`block_hashes_elided`).
    """

    __slots__ = ("hash_ids", "trace_block_size", "_len", "unique_from")

    def __init__(self, hash_ids: Sequence[int], trace_block_size: int, length: int | None = None):
        super().__init__()
        if trace_block_size <= 0:
            raise ValueError("trace_block_size must be > 0")
        self.hash_ids = _compact_ids(hash_ids)
        self.trace_block_size = trace_block_size
        full = len(self.hash_ids) * trace_block_size
        self._len = full if length is None else max(0, min(int(length), full))
        self.unique_from: int | None = None

    def __len__(self) -> int:
        return self._len

    def tokens(self, start: int = 0, end: int | None = None) -> list[int]:
        out: list[int] = []
        for token, count in self._pieces(start, self._len if end is None else end):
            out.extend([token] * count)
        return out

    def _pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(token, count)`` of each trace block's part of tokens ``[start, end)``, in order
        (the token taken modulo 2**32)."""
        end = min(end, self._len)
        out: list[tuple[int, int]] = []
        tb = self.trace_block_size
        pos = max(0, start)
        while pos < end:
            idx = pos // tb
            stop = min(end, (idx + 1) * tb)
            out.append((self.hash_ids[idx] & _MASK32, stop - pos))
            pos = stop
        return out

    def token_bytes(self, start: int, end: int) -> bytes:
        """Each trace block's part of the range as its token's bytes repeated (no token list)."""
        pack = U32_STRUCT.pack
        tb = self.trace_block_size
        end = min(end, self._len)
        if 0 <= start < end and start // tb == (end - 1) // tb:  # one trace block's tokens
            return pack(self.hash_ids[start // tb] & _MASK32) * (end - start)
        return b"".join([pack(token) * count for token, count in self._pieces(start, end)])

    def block_hashes_elided(self, block_size: int) -> tuple[list[int], list[int]]:
        """Real hashes for the blocks another request could share; from the first block that
        ends at or after ``unique_from + 2`` on, placeholders (``servesim.kv.hashing.
        placeholder_hashes``; the local hashes too). Cached like :meth:`block_hashes` (under
        ``-block_size``), so every reader of this prompt gets the same placeholders."""
        u = self.unique_from
        n = self._len // block_size
        if u is None:
            return self.block_hashes(block_size)
        first = max(0, -(-(u + 2) // block_size) - 1)
        if first >= n:
            return self.block_hashes(block_size)
        cache = self._cache()
        cached = cache.get(-block_size)
        if cached is None and first == 0:
            # No block can be shared: one placeholder list serves both (never mutated: readers
            # that grow the lists copy them first, as SequenceBlocks does).
            fake = placeholder_hashes(n)
            cached = cache[-block_size] = (fake, fake)
        elif cached is None:
            real = cache.get(block_size)
            if real is not None:
                seq, local = real[0][:first], real[1][:first]
            else:
                local = self._local_hashes(block_size, first)
                seq = sequence_hashes(local)
            fake = placeholder_hashes(n - first)
            seq.extend(fake)
            local.extend(fake)
            cached = (seq, local)
            cache[-block_size] = cached
        return cached

    def shared_blocks(self, block_size: int) -> int:
        """The blocks before the first one :meth:`block_hashes_elided` gives a placeholder."""
        n = self._len // block_size
        u = self.unique_from
        if u is None:
            return n
        return min(n, max(0, -(-(u + 2) // block_size) - 1))

    def _local_hashes(self, block_size: int, n: int | None = None) -> list[int]:
        tb = self.trace_block_size
        if tb % block_size != 0:
            return super()._local_hashes(block_size, n)
        if n is None:
            n = self._len // block_size
        per = tb // block_size
        # One hash per trace block id: its ``per`` engine blocks hold the same tokens.
        ids = self.hash_ids[: -(-n // per)]
        if ids and (min(ids) < 0 or max(ids) > _MASK32):
            ids = tuple([h & _MASK32 for h in ids])
        local = repeated_token_hashes(ids, block_size)
        if per == 1:
            return local
        # Each hash ``per`` times in a row: one C-level slice assignment per copy.
        out: list[int] = [0] * (len(local) * per)
        for j in range(per):
            out[j::per] = local
        del out[n:]
        return out

    def __repr__(self) -> str:
        return f"RepeatedBlockTokens(blocks={len(self.hash_ids)}, len={self._len})"
