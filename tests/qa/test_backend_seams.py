"""Each backend's reference scheduling pass reads on its own: its fast paths (the steady
batch and the runs of passes built on it) sit in the backend's ``fast`` subpackage, behind one
seam entered from named modules only (docs/architecture.md). Read from the source tree with
the import-cycle test's :mod:`ast` walk: every run-time import counts, lazy ones too,
``TYPE_CHECKING`` ones not."""

from __future__ import annotations

import pytest

from tests.qa.test_import_cycles import ROOT, _imported, _modules

# backend package -> the seam's entries: module -> the ``fast`` modules it may import. The rank
# starts runs; the modules named besides it are parts of the reference pass that keep or
# write back a steady batch. Every other module of the package, ``fast`` aside, is the
# reference pass (or plugin glue) and imports neither the backend's ``fast`` nor core's
# ``servesim.fast``.
BACKENDS: dict[str, dict[str, set[str]]] = {
    "servesim_vllm": {"rank": {"fast.runs", "fast.steady"}, "scheduler": {"fast.steady"}},
    "servesim_trtllm": {"rank": {"fast.runs", "fast.steady"}, "core": {"fast.steady"}},
    # no steady batch: its runs (fast.runs with fast.run_head) re-derive the decode pass
    "servesim_sglang": {"rank": {"fast.runs"}},
}
# The reference pass's modules: each must exist (so that a rename cannot empty the check).
REFERENCE = {
    "servesim_vllm": {"scheduler", "request", "cadence", "behaviour", "speculative",
                      "host_offload", "handoff", "shape", "pass_result", "interfaces", "config",
                      "priority", "lora", "async_scheduling"},
    "servesim_trtllm": {"core", "policies", "request", "work", "speculative", "handoff",
                        "config", "queue_sums", "interfaces", "batch_wait"},
    "servesim_sglang": {"scheduler", "admission", "retraction", "overlap", "radix_cache",
                        "radix_records", "request", "policies", "behaviour", "config",
                        "speculative", "handoff", "pass_outcome", "interfaces", "recv_interval", "priority",
                        "priority_options", "warm_start", "mixed"},
}


def _fast_imports(package: str) -> dict[str, set[str]]:
    """Module (within the package) -> the fast-path modules it imports at run time: the
    backend's as ``fast.<name>`` (``fast`` for the subpackage itself), core's as
    ``servesim.fast[.<name>]``."""
    src = ROOT / "plugins" / package.removeprefix("servesim_") / "src"
    modules = _modules(src)
    out: dict[str, set[str]] = {}
    for module, path in modules.items():
        if not module.startswith(package + "."):
            continue
        names = set()
        for candidate in _imported(module, path):
            first, _, fallback = candidate.partition("|")
            name = first if first in modules or not fallback else fallback
            if name == f"{package}.fast" or name.startswith(f"{package}.fast."):
                names.add(name.removeprefix(package + "."))
            elif name == "servesim.fast" or name.startswith("servesim.fast."):
                names.add(name)
        out[module.removeprefix(package + ".")] = names
    return out


@pytest.mark.parametrize("package", BACKENDS)
def test_fast_paths_are_entered_from_the_seam_only(package: str) -> None:
    entries = BACKENDS[package]
    imports = _fast_imports(package)
    assert REFERENCE[package] <= set(imports), "a listed reference module is missing"
    assert set(entries) <= set(imports), "a listed entry module is missing"
    assert any(m.startswith("fast.") for m in imports), "the fast subpackage is missing"
    for module, names in imports.items():
        if module == "fast" or module.startswith("fast."):
            continue
        allowed = entries.get(module, set())
        if module != "rank":
            # the reference pass knows nothing of runs, in the backend or in core
            assert not {n for n in names if n.startswith("servesim.fast")}, module
        assert {n for n in names if not n.startswith("servesim.")} <= allowed, (
            f"{module} reaches the fast paths outside the seam")
    runs = {m for m, names in imports.items() if "fast.runs" in names}
    assert runs == {"rank"}, "only the rank starts runs (execute_run/complete_run)"


def test_the_reference_modules_are_the_rest_of_the_package() -> None:
    """Every module outside ``fast`` is the rank, a listed reference module or plugin glue, so
    that a new module is placed on one side of the seam on purpose."""
    glue = {"", "plugin", "conformance"}
    for package in BACKENDS:
        modules = {m for m in _fast_imports(package) if m != "fast" and not m.startswith("fast.")}
        assert modules - {"rank"} - REFERENCE[package] - glue == set(), package


def test_sglang_run_head_belongs_to_its_runs() -> None:
    """SGLang's runs keep their queue-head check (``fast/run_head.py``) to themselves."""
    src = ROOT / "plugins" / "sglang" / "src"
    users = {module for module, path in _modules(src).items()
             if any("servesim_sglang.fast.run_head" in name.split("|")
                    for name in _imported(module, path))}
    assert users == {"servesim_sglang.fast.runs"}
