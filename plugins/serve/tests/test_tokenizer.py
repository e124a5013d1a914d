"""The built-in word tokenizer and a Hugging Face tokenizer.json (the layout make_tokenizer.py writes)."""

from __future__ import annotations

import httpx
import pytest
from servesim.errors import ConfigError
from servesim_serve.testing import running
from servesim_serve.tokenizer import HfTokenizer, Tokenizer
from tokenizers import Tokenizer as HfTok
from tokenizers import decoders, models, pre_tokenizers


def test_builtin_words() -> None:
    tok = Tokenizer()
    ids = tok.encode("w0 w12  <s> hello w01")
    assert ids[:3] == [4, 16, 1] and len(ids) == 5
    assert ids[3] >= 1 << 32 and ids[4] >= 1 << 32  # outside the w<k> vocabulary
    assert tok.decode([4, 16, 1]) == "w0 w12 <s>"
    assert [tok.piece(i, j == 0) for j, i in enumerate([4, 5])] == ["w0", " w1"]
    assert [tok.is_special(i) for i in (0, 1, 2, 3, 4, 1 << 32)] == [True] * 4 + [False] * 2


def make_word_tokenizer(path) -> str:
    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials)} | {f"w{i}": i + 4 for i in range(64)}
    tk = HfTok(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tk.add_special_tokens(specials)
    path.mkdir()
    tk.save(str(path / "tokenizer.json"))
    return str(path)


def test_hf_tokenizer_folder(tmp_path) -> None:
    tok = HfTokenizer(make_word_tokenizer(tmp_path / "tok"))
    assert tok.encode("w3 w5 zzz") == [7, 9, 0]
    assert tok.decode([7, 9]) == "w3 w5"
    assert list(tok.output_pool[:3]) == [4, 5, 6] and len(tok.output_pool) == 64
    assert [tok.piece(i, j == 0) for j, i in enumerate([4, 5, 6])] == ["w0", " w1", " w2"]
    assert [tok.is_special(i) for i in (0, 1, 2, 3, 4, 67)] == [True] * 4 + [False] * 2


def test_a_completion_leaves_out_the_special_thinking_boundaries_of_a_tokenizer_json(tmp_path) -> None:
    path = make_word_tokenizer(tmp_path / "tok")
    reasoning = "serve.reasoning={thinking_ratio: 0.5, start_thinking_token_id: 1, end_thinking_token_id: 2}"
    with running([f"serve.tokenizer={path}", "serve.speedup=1000", reasoning]) as s:
        r = httpx.post(s.base + "/completions", json={"prompt": "w1", "max_tokens": 6}).json()
    # [<s>, w1, </s>, w3, w4, w5]: <s> and </s> are the tokenizer's special tokens
    assert r["choices"][0]["text"] == "w1 w3 w4 w5" and r["usage"]["completion_tokens"] == 6


def test_server_with_a_tokenizer_folder(tmp_path) -> None:
    path = make_word_tokenizer(tmp_path / "tok")
    with running([f"serve.tokenizer={path}", "serve.speedup=1000"]) as s:
        r = httpx.post(s.base + "/completions", json={"prompt": "w1 w2 w3 w4", "max_tokens": 3}).json()
        models = httpx.get(s.base + "/models").json()
    assert r["choices"][0]["text"] == "w0 w1 w2" and r["usage"]["prompt_tokens"] == 4
    assert models["data"][0]["root"] == path


def test_a_missing_tokenizer_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        HfTokenizer(str(tmp_path / "nothing"))
    assert info.value.path == "serve.tokenizer"
