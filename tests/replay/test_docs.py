"""docs/configuration.md and docs/report.md name every key they document."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import attrs
import pytest
from servesim.config.engine import EngineConfig
from servesim.config.sections import (
    ClusterConfig,
    ReportConfig,
    SinksConfig,
    SyntheticConfig,
    TraceConfig,
    WorkloadConfig,
)
from servesim.report.stats import RequestLog
from servesim.report.summary import build_report

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(
    "cls",
    [EngineConfig, ClusterConfig, WorkloadConfig, TraceConfig, SyntheticConfig, ReportConfig, SinksConfig],
)
def test_every_config_key_is_documented(cls):
    text = (DOCS / "configuration.md").read_text()
    missing = [f.name for f in attrs.fields(cls) if f"| `{f.name}` |" not in text]
    assert missing == []


def test_every_report_key_is_documented():
    log = RequestLog([1])
    log.arrival[0], log.done[0] = 0.0, 1.0
    report = build_report(log, ReportConfig(sla_ttft_ms=1.0))
    text = (DOCS / "report.md").read_text()
    families = ("ttft", "tpot", "itl", "e2el", "ttst", "output_token_throughput_per_user")
    missing = [
        k for k in report
        if f"`{k}`" not in text and not any(k.endswith(f"_{m}_ms") or k.endswith(f"_{m}") for m in families)
    ]
    assert missing == []


def _plugin_option_classes() -> list[tuple[str, type]]:
    from servesim.config.sections import PoolConfig
    from servesim.plugins import Plugins

    out: list[tuple[str, type]] = [("pool", PoolConfig)]
    plugins = Plugins()
    for kind in ("backend", "timing_model", "eviction_policy", "kv_event_sink", "fpm_sink", "router"):
        registry = plugins.registry(kind)
        for name in registry.names():
            entry = registry.entry(name)
            cls = getattr(entry.obj, "config_class", None)
            if cls is not None and attrs.has(cls) and not entry.distribution.startswith("servesim-toy"):
                out.append((f"{kind} {name}", cls))
    return out


def test_every_plugin_option_is_documented():
    """Pools and every installed plugin's options (backend sections, timing models, eviction
    policies, sinks, routers) are named in docs/configuration.md; the example plugin
    documents its own."""
    text = (DOCS / "configuration.md").read_text()
    classes = _plugin_option_classes()
    # The option classes are read from what is installed (the compiled-build test's venv has
    # only the backends and the eviction plugins); core's and the eviction plugins' always are.
    expected = {"eviction_policy multi_lru", "kv_event_sink sample"}
    if importlib.util.find_spec("servesim_aic") is not None:
        expected.add("timing_model aic")
    assert expected <= {k for k, _c in classes}
    missing = [(k, f.name) for k, cls in classes for f in attrs.fields(cls) if f"`{f.name}`" not in text]
    assert missing == []
