"""A catalogued AIConfigurator model's layer count (its shipped HuggingFace config)."""

from __future__ import annotations

import json
from functools import cache


@cache
def num_layers(model: str) -> int:
    from servesim_aic import catalog

    path = catalog._root() / "model_configs" / (model.replace("/", "--", 1) + catalog.CONFIG_SUFFIX)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    value = config.get("num_hidden_layers", text.get("num_hidden_layers"))
    return value if isinstance(value, int) and value > 0 else 0
