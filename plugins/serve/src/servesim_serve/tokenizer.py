"""Tokenizers: the built-in word tokenizer, or a Hugging Face ``tokenizer.json`` (``tokenizers``).

The built-in one counts one token per whitespace-separated word, with the vocabulary of
``make_tokenizer``-style folders: ``<unk>``=0, ``<s>``=1, ``</s>``=2, ``<pad>``=3, word ``w<k>``
= ``k + 4``; any other word gets a stable id from its CRC-32 (above every ``w<k>`` id in
practice) and decodes as ``w<id - 4>``. Output text is deterministic: a request's ``j``-th
output token is the ``j``-th id of :attr:`Tokenizer.output_pool`, cycling.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import Any

from servesim.errors import ConfigError

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")
_OTHER_BASE = 1 << 32  # ids of words outside the w<k> vocabulary start here
POOL_SIZE = 4096


class Tokenizer:
    """Encode, decode, and the ids output tokens cycle through."""

    name: str = "servesim-words"
    output_pool: Sequence[int] = range(4, 4 + POOL_SIZE)

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word in SPECIALS:
                ids.append(SPECIALS.index(word))
            elif word[:1] == "w" and word[1:].isdigit() and str(int(word[1:])) == word[1:]:
                ids.append(int(word[1:]) + 4)
            else:
                ids.append(_OTHER_BASE + zlib.crc32(word.encode("utf-8")))
        return ids

    def token_text(self, token_id: int) -> str:
        return SPECIALS[token_id] if 0 <= token_id < 4 else f"w{token_id - 4}"

    def is_special(self, token_id: int) -> bool:
        """A special token: its text is left out of generated text (vLLM's default
        ``skip_special_tokens``)."""
        return 0 <= token_id < len(SPECIALS)

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.token_text(i) for i in ids)

    def piece(self, token_id: int, first: bool) -> str:
        """The text one output token adds to what came before it."""
        text = self.token_text(token_id)
        return text if first else " " + text

    def render_chat(self, messages: Sequence[dict[str, Any]]) -> str:
        """``role: content`` lines and ``assistant:`` (the chat template of make_tokenizer)."""
        lines = [f"{m['role']}: {m['content']}\n" for m in messages]
        return "".join(lines) + "assistant:"


class HfTokenizer(Tokenizer):
    """A Hugging Face tokenizer loaded with ``tokenizers`` (no ``transformers``)."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer as HfTok

        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        try:
            self._tok = HfTok.from_file(file)
        except Exception as exc:  # tokenizers raises its own Exception subclass
            raise ConfigError(f"cannot load tokenizer {file!r}: {exc}", path="serve.tokenizer") from None
        self.name = path
        added = self._tok.get_added_tokens_decoder()  # id -> AddedToken
        special = set(added)
        self._special = {i for i, t in added.items() if getattr(t, "special", False)}
        vocab = sorted(i for i in self._tok.get_vocab(with_added_tokens=False).values() if i not in special)
        self.output_pool = vocab[:POOL_SIZE] or [0]

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def token_text(self, token_id: int) -> str:
        return self._tok.decode([token_id], skip_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special

    def piece(self, token_id: int, first: bool) -> str:
        # The text a token adds is the difference between decoding with and without it.
        if first:
            return self.token_text(token_id)
        base = self.output_pool[0]
        return self.decode([base, token_id])[len(self.token_text(base)):]


def load_tokenizer(path: str | None) -> Tokenizer:
    return Tokenizer() if path is None else HfTokenizer(path)
