"""Start-up: implementations registered by import path load only when a run selects them
(``Registry.add_lazy``), each kind's hooks run when that kind is first asked for, and a
one-backend run imports no other backend's machinery."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from servesim import hookimpl
from servesim.errors import PluginError
from servesim.plugins import Plugins, make_plugin_manager
from servesim.registry import Registry


def test_a_lazy_entry_is_imported_on_first_get_and_then_kept() -> None:
    reg = Registry("backend")
    reg.set_source("inline", "inline-dist 1.0")  # noqa: SLF001
    reg.add_lazy("json", "json.decoder:JSONDecoder")
    assert "json" in reg and reg.names() == ["json"]
    from json.decoder import JSONDecoder

    assert reg.get("json") is JSONDecoder
    assert reg.entry("json").obj is JSONDecoder
    assert reg.entry("json").plugin == "inline"


def test_a_lazy_entry_that_fails_to_import_names_its_plugin() -> None:
    reg = Registry("timing_model")
    reg.set_source("broken", "broken-dist 2.0")  # noqa: SLF001
    reg.add_lazy("nope", "servesim_no_such_module:Thing")
    with pytest.raises(PluginError, match=r"^plugin 'broken' \(distribution broken-dist 2.0\) failed "
                       r"to load timing_model 'nope' from servesim_no_such_module:Thing: "
                       r"ModuleNotFoundError"):
        reg.get("nope")
    with pytest.raises(PluginError, match="lazy target must be 'module:attribute'"):
        reg.add_lazy("bad", "json.decoder")


def test_iterating_a_registry_loads_every_entry() -> None:
    reg = Registry("router")
    reg.add_lazy("b", "json:JSONEncoder")
    reg.add("a", int)
    assert [(e.name, e.obj) for e in reg] == [("a", int), ("b", json.JSONEncoder)]


def test_each_kind_is_filled_on_first_use() -> None:
    calls: list[str] = []

    def servesim_register_backends(registry: Registry) -> None:
        calls.append(registry.kind)

    def servesim_register_routers(registry: Registry) -> None:
        calls.append(registry.kind)

    pm = make_plugin_manager(autoload=False)
    pm.register(types.SimpleNamespace(
        servesim_register_backends=hookimpl(servesim_register_backends),
        servesim_register_routers=hookimpl(servesim_register_routers)), "inline")
    plugins = Plugins(pm)
    plugins.backends()
    assert calls == ["backend"]
    plugins.routers()
    plugins.backends()
    assert calls == ["backend", "router"]


def test_a_vllm_run_imports_no_other_backend(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from servesim.cli.main import main\n"
        "status = main(['run', '--quiet', '--set', 'workload.synthetic.num_requests=5'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('servesim_', 'servesim.timing.'))))\n"
        "raise SystemExit(status)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = eval(out.stdout.strip().splitlines()[-1])  # a printed list of module names
    assert any(m.startswith("servesim_vllm.") for m in loaded)
    # Other distributions' entry-point modules load (their hooks), their machinery does not.
    others = [m for m in loaded if m.startswith(("servesim_sglang", "servesim_trtllm", "servesim_lfu",
                                                 "servesim_lineage", "servesim_multi_lru", "servesim_aic",
                                                 "servesim_zmq", "servesim_prometheus", "servesim_serve"))]
    assert others and all(m.count(".") == 0 or m.endswith(".plugin") for m in others), others
    assert "servesim.timing.interpolated" not in loaded
    assert "servesim_calibrate.fit" not in loaded
