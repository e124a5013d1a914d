"""What the installed aiconfigurator-core can price: model ids, systems, backends, versions.

Read from the package's shipped files (``model_configs/<org>--<name>_config.json``,
``systems/<system>.yaml`` with measured data under ``systems/data/<system>/``), so an unknown
name is reported with the valid ones before anything is compiled or downloaded.
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from pathlib import Path

CONFIG_SUFFIX = "_config.json"
QUANT_SUFFIX = "_hf_quant_config.json"


def _root() -> Path:
    return Path(str(files("aiconfigurator_core")))


@functools.cache
def models() -> tuple[str, ...]:
    """Model ids with a shipped config, e.g. ``Qwen/Qwen3-32B``."""
    out = []
    for path in (_root() / "model_configs").glob(f"*{CONFIG_SUFFIX}"):
        name = path.name
        if name.endswith(QUANT_SUFFIX):
            continue
        out.append(name[: -len(CONFIG_SUFFIX)].replace("--", "/", 1))
    return tuple(sorted(out))


@functools.cache
def systems() -> tuple[str, ...]:
    """Systems (GPU SKUs) that have both a spec file and measured data."""
    root = _root() / "systems"
    return tuple(sorted(p.stem for p in root.glob("*.yaml") if (root / "data" / p.stem).is_dir()))


@functools.cache
def backends(system: str) -> tuple[str, ...]:
    """Backends with measured GEMM data on ``system`` (every priced pass needs GEMMs)."""
    gemm = _root() / "systems" / "data" / system / "gemm"
    return tuple(sorted(p.name for p in gemm.iterdir() if p.is_dir())) if gemm.is_dir() else ()


def backend_versions(system: str, backend: str) -> dict[str, str]:
    """The queryable version slots (``current``, ``previous``, ``next``) and their versions."""
    from aiconfigurator_core.sdk import perf_database

    return dict(perf_database.get_version_slots(system, backend) or {})


def resolve_version(system: str, backend: str, requested: str | None) -> str:
    """The literal data version a slot alias or explicit version names (ValueError if none)."""
    from aiconfigurator_core.sdk import perf_database

    return str(perf_database.resolve_query_version(system, backend, requested or "current"))


@functools.cache
def attention_heads(model: str) -> tuple[int | None, int | None]:
    """``(num_attention_heads, num_key_value_heads)`` of a shipped model config (a
    multimodal model's from its ``text_config``); None where the config gives no count."""
    path = _root() / "model_configs" / (model.replace("/", "--", 1) + CONFIG_SUFFIX)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}

    def count(key: str) -> int | None:
        value = config.get(key, text.get(key))
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    return count("num_attention_heads"), count("num_key_value_heads")


def one_of(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join(values) if values else "(none)"
