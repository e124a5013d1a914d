"""The precomputed SSE chunk bytes equal the JSON of the chunk builders (which test_wire.py
pins to vLLM's bytes), for every finish reason, with and without usage, for any text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from servesim_serve import wire
from servesim_serve.chunk_bytes import ChunkBytes, PieceCache, escaped

ID, CREATED, MODEL = "cmpl-abc", 1700000000, "servé\"sim"
TEXTS = ["", " w1", "w0 w1", 'quote " and \\ backslash', "new\nline\ttab\x01", "ünïcödé 漢字 🙂"]
FINISH = [None, "length", "abort"]
USAGE = [None, (3, 1), (1000, 64)]


def sse(body: dict) -> bytes:
    return wire.sse(body).encode("utf-8")


@pytest.mark.parametrize("finish", FINISH)
@pytest.mark.parametrize("usage", USAGE)
@pytest.mark.parametrize("text", TEXTS)
def test_completion_chunks(text: str, finish: str | None, usage: tuple[int, int] | None) -> None:
    ours = ChunkBytes(ID, CREATED, MODEL, chat=False).completion(escaped(text), finish, usage)
    assert ours == sse(wire.completion_chunk(ID, CREATED, MODEL, text, finish, usage))


@pytest.mark.parametrize("reasoning", [False, True])
@pytest.mark.parametrize("finish", FINISH)
@pytest.mark.parametrize("usage", USAGE)
@pytest.mark.parametrize("text", TEXTS)
def test_chat_chunks(text: str, reasoning: bool, finish: str | None, usage: tuple[int, int] | None) -> None:
    rid = "chat" + ID
    ours = ChunkBytes(rid, CREATED, MODEL, chat=True).chat(escaped(text), reasoning, finish, usage)
    assert ours == sse(wire.chat_chunk(rid, CREATED, MODEL, wire.chat_delta(text, reasoning), finish, usage))


@given(st.lists(st.text(), min_size=1, max_size=5))
def test_escaping_pieces_one_by_one_is_escaping_their_concatenation(pieces: list[str]) -> None:
    assert b"".join(escaped(p) for p in pieces) == escaped("".join(pieces))


def test_the_piece_cache_asks_the_tokenizer_once_per_token_and_position() -> None:
    calls = []

    def piece(token_id: int, first: bool) -> str:
        calls.append((token_id, first))
        return ("" if first else " ") + f'w"{token_id}'

    cache = PieceCache(piece)
    got = [cache.get(7, True), cache.get(7, False), cache.get(7, False), cache.get(7, True)]
    assert got == [b'w\\"7', b' w\\"7', b' w\\"7', b'w\\"7']
    assert calls == [(7, True), (7, False)]


@pytest.mark.parametrize("rid", ["cmpl-0a1b", 'odd "id"\n', "idé"])
@pytest.mark.parametrize("chat", [False, True])
def test_the_chunk_opening_is_the_json_of_any_id(rid: str, chat: bool) -> None:
    out = ChunkBytes(rid, CREATED, MODEL, chat)
    if chat:
        expected = wire.chat_chunk(rid, CREATED, MODEL, wire.chat_delta("x", False), None)
        assert out.chat(b"x", False, None) == sse(expected)
    else:
        assert out.completion(b"x", None) == sse(wire.completion_chunk(rid, CREATED, MODEL, "x", None))
