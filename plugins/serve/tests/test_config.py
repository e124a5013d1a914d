"""The ``serve:`` section: structured by the core loader as a section the command owns."""

from __future__ import annotations

from pathlib import Path

import pytest
from servesim.config.loader import load_config
from servesim.errors import ConfigError
from servesim_serve.cli import load
from servesim_serve.config import ReasoningConfig, ServeConfig


def test_defaults_and_overrides(tmp_path) -> None:
    loaded, cfg = load(None, [])
    assert cfg == ServeConfig()
    assert (cfg.host, cfg.port, cfg.model) == ("127.0.0.1", 8000, "servesim")
    assert (cfg.speedup, cfg.tokenizer) == (1.0, None)
    path = tmp_path / "c.yaml"
    path.write_text("serve:\n  model: m\n  reasoning: {thinking_ratio: 0.25, start_thinking_token_id: 7,"
                    " end_thinking_token_id: 8}\n")
    loaded, cfg = load(str(path), ["serve.speedup=4"], host="0.0.0.0", port=9)
    assert (cfg.model, cfg.speedup, cfg.host, cfg.port) == ("m", 4.0, "0.0.0.0", 9)
    assert cfg.reasoning == ReasoningConfig(thinking_ratio=0.25, start_thinking_token_id=7,
                                            end_thinking_token_id=8)
    assert loaded.resolved()["serve"]["reasoning"]["thinking_ratio"] == 0.25


@pytest.mark.parametrize(("key", "value", "path"), [
    ("serve.speedup", "0", "serve.speedup"),
    ("serve.port", "70000", "serve.port"),
    ("serve.max_queued_requests", "-1", "serve.max_queued_requests"),
    ("serve.default_max_tokens", "0", "serve.default_max_tokens"),
    ("serve.reasoning", "{thinking_ratio: 2, start_thinking_token_id: 1, end_thinking_token_id: 2}",
     "serve.reasoning.thinking_ratio"),
    ("serve.model", "[1]", "serve.model"),
    ("serve.bogus", "1", "serve.bogus"),
])
def test_bad_values_name_their_key(key: str, value: str, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(None, [f"{key}={value}"])
    assert info.value.path == path


def test_a_section_nobody_owns_stays_unknown() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["serve.port=1"])
    assert info.value.path == "serve"
    loaded = load_config(None, ["serve.port=1"], extra_sections={"serve": ServeConfig})
    assert loaded.extra["serve"].port == 1 and load_config(None).extra == {}


@pytest.mark.parametrize(("osl", "ratio", "expected"), [
    (1, 0.9, 0), (2, 0.1, 0), (2, 0.5, 2), (10, 0.05, 0), (10, 0.1, 2), (10, 0.55, 5), (10, 1.0, 10),
])
def test_num_thinking_tokens(osl: int, ratio: float, expected: int) -> None:
    """dynamo-mocker.md §8.2: 0 below 2 tokens, else floor(osl * ratio) clamped to [2, osl]."""
    r = ReasoningConfig(thinking_ratio=ratio, start_thinking_token_id=1, end_thinking_token_id=2)
    assert r.num_thinking_tokens(osl) == expected


def test_every_serve_key_is_documented() -> None:
    import attrs

    docs = Path(__file__).resolve().parents[3] / "docs"
    # configuration.md's `serve:` table, and serve.md's "Limits" table for the limit keys
    text = (docs / "configuration.md").read_text() + (docs / "serve.md").read_text()
    for cls in (ServeConfig, ReasoningConfig):
        assert [f.name for f in attrs.fields(cls) if f"| `{f.name}` |" not in text] == []
