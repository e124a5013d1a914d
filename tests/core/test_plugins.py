"""Plugin discovery: built-ins, entry points (fake and real), blocking, errors naming
distributions, and the Plugins facade.

Fake distributions follow pytest's approach (testing/test_config.py): monkeypatch
``importlib.metadata.distributions`` so nothing needs installing.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Any

import pluggy
import pytest
from servesim import hookimpl
from servesim.errors import PluginError
from servesim.hookspecs import HOOK_KINDS
from servesim.plugins import Plugins, builtin_modules, make_plugin_manager


class FakeDist:
    """Just enough of ``importlib.metadata.Distribution`` for entry-point loading."""

    def __init__(self, name: str, version: str, eps: dict[str, str]) -> None:
        self.metadata = {"Name": name}
        self.version = version
        self.entry_points = [importlib.metadata.EntryPoint(n, v, "servesim") for n, v in eps.items()]
        self.entry_points.append(importlib.metadata.EntryPoint("other", "nowhere:x", "console_scripts"))


def _module(monkeypatch: pytest.MonkeyPatch, name: str, **hooks: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(mod, hook_name, hookimpl(fn))
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


def _install(monkeypatch: pytest.MonkeyPatch, *dists: FakeDist) -> None:
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: list(dists))


def _backend(name: str, obj: object = object) -> Any:
    def servesim_register_backends(registry: Any) -> None:
        registry.add(name, obj)

    return servesim_register_backends


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SERVESIM_DISABLE_PLUGINS", "SERVESIM_DISABLE_PLUGIN_AUTOLOAD", "SERVESIM_TRACE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)


def test_fake_distribution_is_discovered_with_its_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry point in group ``servesim`` is loaded under its entry-point name."""
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("alpha"))
    _install(monkeypatch, FakeDist("fake-a", "1.2", {"alpha_plugin": "fake_a"}))
    plugins = Plugins()
    entry = plugins.backends().entry("alpha")
    assert (entry.plugin, entry.distribution) == ("alpha_plugin", "fake-a 1.2")
    assert plugins.backends().names() == ["alpha"]
    info = {p.name: p for p in plugins.plugin_infos()}["alpha_plugin"]
    assert (info.distribution, info.version, info.hooks) == ("fake-a", "1.2", ("servesim_register_backends",))


def test_duplicate_name_names_both_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("same"))
    _module(monkeypatch, "fake_b", servesim_register_backends=_backend("same"))
    _install(
        monkeypatch, FakeDist("dist-b", "2.0", {"pb": "fake_b"}), FakeDist("dist-a", "1.0", {"pa": "fake_a"})
    )
    with pytest.raises(PluginError) as exc:
        Plugins().registries()
    msg = str(exc.value)
    # Registration order is by plugin name, not sys.path order: pa first.
    assert msg == (
        "backend 'same' is registered twice: by plugin 'pa' (distribution dist-a 1.0) "
        "and by plugin 'pb' (distribution dist-b 2.0)"
    )


def test_duplicate_with_builtin_names_servesim(monkeypatch: pytest.MonkeyPatch) -> None:
    def evict(registry: Any) -> None:
        registry.add("lru", object)

    _module(monkeypatch, "fake_lru", servesim_register_eviction_policies=evict)
    _install(monkeypatch, FakeDist("lru-clone", "0.3", {"clone": "fake_lru"}))
    with pytest.raises(
        PluginError,
        match=r"plugin 'servesim.builtins.kv' \(distribution servesim [^)]+\) "
        r"and by plugin 'clone' \(distribution lru-clone 0.3\)",
    ):
        Plugins().registries()


def test_same_entry_point_name_in_two_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("a"))
    _module(monkeypatch, "fake_b", servesim_register_backends=_backend("b"))
    _install(
        monkeypatch,
        FakeDist("dist-a", "1.0", {"dup": "fake_a"}),
        FakeDist("dist-b", "2.0", {"dup": "fake_b"}),
    )
    with pytest.raises(
        PluginError, match=r"'dup' is claimed by two distributions: dist-a 1.0 and dist-b 2.0"
    ):
        make_plugin_manager()


def test_same_distribution_seen_twice_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("a"))
    dist = FakeDist("dist-a", "1.0", {"pa": "fake_a"})
    _install(monkeypatch, dist, dist)
    assert Plugins().backends().names() == ["a"]


def test_one_module_under_two_entry_points_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("a"))
    _install(monkeypatch, FakeDist("dist-a", "1.0", {"first": "fake_a", "second": "fake_a"}))
    with pytest.raises(
        PluginError, match=r"^plugin entry point 'second' of dist-a 1.0 cannot be registered: "
    ):
        make_plugin_manager()


def test_import_failure_names_entry_point_and_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeDist("broken-dist", "0.9", {"broken": "servesim_no_such_module_xyz"}))
    with pytest.raises(PluginError) as exc:
        make_plugin_manager()
    assert str(exc.value).startswith(
        "plugin 'broken' (entry point 'servesim_no_such_module_xyz' of distribution broken-dist 0.9) "
        "failed to load: ModuleNotFoundError"
    )


def test_blocking_env_var_skips_named_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocked entry points are never imported (like pytest's ``-p no:name``)."""
    _module(monkeypatch, "fake_a", servesim_register_backends=_backend("a"))
    _install(
        monkeypatch,
        FakeDist("dist-a", "1.0", {"pa": "fake_a"}),
        FakeDist("broken-dist", "0.9", {"broken": "servesim_no_such_module_xyz"}),
    )
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", " broken , pa,")
    plugins = Plugins()
    assert plugins.backends().names() == []
    assert plugins.pm.is_blocked("broken") and plugins.pm.is_blocked("pa")


def test_blocking_a_builtin_removes_its_registrations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", "servesim.builtins.kv")
    plugins = Plugins(autoload=False)
    assert "lru" not in plugins.eviction_policies()
    with pytest.raises(PluginError, match=r"^unknown eviction_policy 'lru'; installed: \(none\)"):
        plugins.eviction_policies().get("lru")


def test_autoload_can_be_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeDist("broken-dist", "0.9", {"broken": "servesim_no_such_module_xyz"}))
    assert make_plugin_manager(autoload=False).get_plugin("broken") is None
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = make_plugin_manager()
    names = {name for name, _ in pm.list_name_plugin()}
    assert names == {name for name, _ in builtin_modules()}


def test_builtins_are_registered_in_module_order_as_servesim() -> None:
    pm = make_plugin_manager(autoload=False)
    expected = [name for name, _ in builtin_modules()]
    assert expected == sorted(expected) and "servesim.builtins.kv" in expected
    for name in expected:
        assert pm.distribution_of(name).name == "servesim"
    assert Plugins(pm).eviction_policies().entry("lru").plugin == "servesim.builtins.kv"


def test_unknown_hook_is_an_error_naming_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_typo", servesim_register_backend=_backend("a"))
    _install(monkeypatch, FakeDist("typo-dist", "1.0", {"typo": "fake_typo"}))
    message = ("plugin 'typo' (typo-dist 1.0) implements an unknown hook 'servesim_register_backend' "
               "(did you mean 'servesim_register_backends'?); "
               "set SERVESIM_DISABLE_PLUGINS=typo to run without it")
    with pytest.raises(PluginError) as info:
        make_plugin_manager()
    assert str(info.value) == message
    # tolerant (servesim plugins): the plugin is left out, its error kept, the rest loads
    pm = make_plugin_manager(tolerant=True)
    assert pm.broken == {"typo": message}
    assert pm.get_plugin("typo") is None and pm.get_plugin("servesim.builtins.kv") is not None
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", "typo")
    assert make_plugin_manager().broken == {}


def test_a_plugin_with_two_unknown_hooks_is_left_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _module(monkeypatch, "fake_typos", servesim_register_backend=_backend("a"),
            servesim_register_router=_backend("b"))
    _install(monkeypatch, FakeDist("typos-dist", "1.0", {"typos": "fake_typos"}))
    pm = make_plugin_manager(tolerant=True)
    assert list(pm.broken) == ["typos"]
    assert pm.broken["typos"].startswith(
        "plugin 'typos' (typos-dist 1.0) implements an unknown hook 'servesim_register_backend' "
        "(did you mean 'servesim_register_backends'?)")
    assert pm.get_plugin("typos") is None


def test_hookimpl_with_unknown_argument_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def servesim_register_backends(registry: Any, extra: Any) -> None:
        raise AssertionError("never called")

    _module(monkeypatch, "fake_args", servesim_register_backends=servesim_register_backends)
    _install(monkeypatch, FakeDist("args-dist", "1.0", {"args": "fake_args"}))
    with pytest.raises(PluginError, match=r"entry point 'args' of args-dist 1.0 is invalid: .*extra"):
        make_plugin_manager()


def test_failing_hook_names_plugin_and_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    def servesim_register_routers(registry: Any) -> None:
        raise RuntimeError("boom")

    _module(monkeypatch, "fake_boom", servesim_register_routers=servesim_register_routers)
    _install(monkeypatch, FakeDist("boom-dist", "3.1", {"boom": "fake_boom"}))
    with pytest.raises(
        PluginError,
        match=r"^plugin 'boom' \(boom-dist 3.1\) failed in servesim_register_routers: "
        r"RuntimeError: boom$",
    ):
        Plugins().registries()


def test_registries_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def servesim_register_backends(registry: Any) -> None:
        calls.append(registry.kind)
        registry.add("counted", object)

    pm = make_plugin_manager(autoload=False)
    pm.register(
        types.SimpleNamespace(servesim_register_backends=hookimpl(servesim_register_backends)), "inline"
    )
    plugins = Plugins(pm)
    first = plugins.registries()
    assert plugins.registries() is first and plugins.backends() is first["backend"]
    assert calls == ["backend"]
    assert list(first) == list(HOOK_KINDS.values())
    assert first["backend"].entry("counted").distribution == "<direct>"
    with pytest.raises(PluginError, match="unknown plugin kind 'nope'"):
        plugins.registry("nope")


def test_trace_env_writes_hook_calls_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVESIM_TRACE_PLUGINS", "1")
    plugins = Plugins(autoload=False)
    plugins.registries()
    err = capsys.readouterr().err
    implemented = {h for p in plugins.plugin_infos() for h in p.hooks}
    assert "servesim_register_eviction_policies" in implemented
    lines = [line.strip() for line in err.splitlines()]
    for hook_name in HOOK_KINDS:
        # One trace entry per call: each implementing plugin is called on its own.
        calls = sum(hook_name in p.hooks for p in plugins.plugin_infos())
        assert lines.count(f"{hook_name} [hook]") == calls
    assert "plugin: servesim.builtins.kv" in lines and "registry: eviction_policy" in lines


def test_registration_hooks_cannot_be_wrappers() -> None:
    def servesim_register_backends(registry: Any) -> Any:
        yield

    pm = make_plugin_manager(autoload=False)
    impl = pluggy.HookimplMarker("servesim")(wrapper=True)(servesim_register_backends)
    pm.register(types.SimpleNamespace(servesim_register_backends=impl), "wrapping")
    with pytest.raises(
        PluginError, match="plugin 'wrapping': servesim_register_backends cannot be a hook wrapper"
    ):
        Plugins(pm).registries()


def test_no_trace_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    Plugins(autoload=False).registries()
    assert capsys.readouterr().err == ""


def test_unknown_name_lists_installed_names() -> None:
    registry = Plugins(autoload=False).timing_models()
    with pytest.raises(PluginError) as exc:
        registry.get("polynomal")
    installed = ", ".join(registry.names())
    assert (
        str(exc.value) == f"unknown timing_model 'polynomal'; installed: {installed} (see 'servesim plugins')"
    )
    assert {"polynomial", "fixed"} <= set(registry.names())


# ------------------------------------------------------------------ the real entry points


def test_real_entry_points_are_discovered() -> None:
    """The installed distributions (editable, from requirements-dev.txt) are found."""
    plugins = Plugins()
    infos = {p.name: p for p in plugins.plugin_infos()}
    for name, dist in [
        ("vllm", "servesim-vllm"),
        ("sglang", "servesim-sglang"),
        ("trtllm", "servesim-trtllm"),
        ("toy", "servesim-toy"),
    ]:
        assert infos[name].distribution == dist
        assert infos[name].version == importlib.metadata.version(dist)
    toy = plugins.backends().entry("toy")
    from servesim_toy.rank import ToyRank

    assert toy.obj is ToyRank and toy.distribution == f"servesim-toy {infos['toy'].version}"
    assert plugins.timing_models().entry("toy_constant").plugin == "toy"


def test_real_plugin_blocked_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESIM_DISABLE_PLUGINS", "toy")
    plugins = Plugins()
    assert "toy" not in plugins.backends() and "toy_constant" not in plugins.timing_models()
    assert "toy" not in {p.name for p in plugins.plugin_infos()}


@pytest.mark.parametrize(("hook_name", "kind"), sorted(HOOK_KINDS.items()))
def test_each_hook_fills_its_own_registry(hook_name: str, kind: str) -> None:
    """Every hook in the spec reaches exactly the registry of its kind."""
    marker = object()

    def impl(registry: Any) -> None:
        registry.add(f"probe-{registry.kind}", marker)

    pm = make_plugin_manager(autoload=False)
    pm.register(types.SimpleNamespace(**{hook_name: hookimpl(impl)}), "probe")
    registries = Plugins(pm).registries()
    for other_kind, registry in registries.items():
        names = {e.name for e in registry if e.plugin == "probe"}
        assert names == ({f"probe-{kind}"} if other_kind == kind else set())
    assert registries[kind].get(f"probe-{kind}") is marker
