"""Core's folder tree is its architecture (docs/architecture.md, "Layers"): the top level holds
the contract and the framework only, each subpackage imports only the layers below it, and
the speed overlay (``servesim.fast``) is entered from a fixed set of composition points.

Imports are read from the source with :mod:`ast` (tests/qa/test_import_cycles.py's walk),
``TYPE_CHECKING`` ones included: a type a module names is a dependency too.
"""

from __future__ import annotations

import pytest

import tests.qa.test_import_cycles as cycles

SRC = cycles.ROOT / "core" / "src"

#: Core's top-level modules: the contract and the framework that loads plugins.
TOP_LEVEL = {"_compiled", "_markers", "contract", "engine", "errors", "factory", "hookspecs",
             "plugin_scan", "plugins", "rank", "registry", "tokens"}

#: Package (or top-level module) -> what it may import. docs/architecture.md draws this table.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_markers": set(),
    "_compiled": set(),
    "registry": {"errors"},
    "tokens": {"kv"},
    "contract": {"tokens"},
    "mechanics": {"contract", "errors"},
    "kv": {"_compiled", "contract", "sinks"},
    "timing": {"_compiled", "config", "contract", "errors", "mechanics"},
    "rank": {"config", "contract", "kv", "mechanics", "timing"},
    "engine": {"contract", "errors", "mechanics", "rank", "timing"},
    "factory": {"config", "engine", "kv", "rank", "timing"},
    "workload": {"config", "errors", "tokens"},
    "sinks": {"config", "contract", "errors", "kv"},
    "config": {"contract", "errors", "factory", "kv", "mechanics", "plugins", "rank",
               "timing", "workload"},
    "report": {"config", "mechanics"},
    "hookspecs": {"_markers", "config", "contract", "registry", "replay"},
    "plugins": {"_markers", "builtins", "errors", "hookspecs", "plugin_scan", "registry"},
    "plugin_scan": set(),
    "builtins": {"_markers", "kv", "registry", "replay", "sinks", "workload"},
    "replay": {"_compiled", "config", "contract", "engine", "errors", "factory", "fast", "kv",
               "mechanics", "plugins", "rank", "report", "sinks", "tokens", "workload"},
    "fast": {"_compiled", "config", "contract", "engine", "errors", "factory", "kv", "mechanics",
             "rank", "replay", "tokens", "report", "sinks", "timing", "workload"},
    "testing": {"config", "contract", "engine", "errors", "factory", "fast", "kv", "plugins",
                "replay", "sinks", "timing", "tokens", "workload"},
    "cli": {"config", "errors", "plugins", "replay", "report", "sinks"},
}

#: The modules outside ``servesim.fast`` that import it: the composition points of the speed
#: overlay: the places that compose it or check it (docs/architecture.md, "The speed overlay").
FAST_ENTRIES = {
    "servesim.replay.runner",  # hands the overlay (fast.overlay.FastOverlay) to the replay
    "servesim.testing.driver",  # the kits check runs against stepping
    "servesim.testing.runs_check",
    "servesim.testing.timing_kit",  # checks fast.decode_many's protocol against the scalar method
}


def _graph() -> dict[str, set[str]]:
    return cycles._graph(cycles._modules(SRC), type_checking=True)  # TYPE_CHECKING imports count


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "servesim"


def test_the_top_level_holds_the_contract_and_the_framework() -> None:
    top = {p.stem for p in (SRC / "servesim").glob("*.py")} - {"__init__"}
    assert top == TOP_LEVEL


def test_every_layer_imports_only_the_layers_below_it() -> None:
    graph = _graph()
    wrong = sorted((m, t) for m, targets in graph.items() for t in targets
                   if _layer(m) not in ("servesim", _layer(t))
                   and t.startswith("servesim") and _layer(t) not in ALLOWED[_layer(m)])
    assert wrong == []
    assert set(ALLOWED) >= {_layer(m) for m in graph} - {"servesim"}


def test_the_speed_overlay_is_entered_from_the_composition_points_only() -> None:
    graph = _graph()
    entries = {m for m, targets in graph.items() if not m.startswith("servesim.fast")
               and any(t == "servesim.fast" or t.startswith("servesim.fast.") for t in targets)}
    assert entries == FAST_ENTRIES


@pytest.mark.parametrize("layer", ["cli", "testing", "builtins"])
def test_the_outer_layers_are_imported_by_no_inner_one(layer: str) -> None:
    graph = _graph()
    users = {m for m, targets in graph.items() if _layer(m) != layer
             and any(_layer(t) == layer for t in targets)}
    assert users <= ({"servesim.plugins"} if layer == "builtins" else set())


def test_core_imports_no_plugin() -> None:
    imported = {name.partition("|")[0] for module, path in cycles._modules(SRC).items()
                for name in cycles._imported(module, path)}
    assert sorted(n for n in imported if n.startswith("servesim_")) == []
