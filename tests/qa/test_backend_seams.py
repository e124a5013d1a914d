"""Each backend's reference scheduling pass reads on its own: its fast paths (the steady
batch and the runs of passes built on it) sit behind one seam, entered from named modules
only (docs/architecture.md). Read from the source tree with the import-cycle test's
:mod:`ast` walk: every run-time import counts, lazy ones too, ``TYPE_CHECKING`` ones not."""

from __future__ import annotations

import pytest

from tests.qa.test_import_cycles import ROOT, _imported, _modules

# backend package -> (modules that may enter the steady batch, the reference pass's modules)
BACKENDS = {
    "servesim_vllm": ({"scheduler", "rank", "fast.runs"},
                      {"scheduler", "request", "cadence", "behaviour", "speculative",
                       "host_offload", "handoff", "shape"}),
    "servesim_trtllm": ({"core", "rank", "fast.runs"},
                        {"core", "policies", "request", "work", "speculative", "handoff",
                         "config"}),
    # no steady batch: its runs (runs.py with run_head.py) re-derive the steady decode pass
    "servesim_sglang": ({"rank", "runs"},
                        {"scheduler", "admission", "retraction", "overlap", "radix_cache",
                         "radix_records", "request", "policies", "behaviour", "config",
                         "speculative", "handoff"}),
}
SEAM = ("steady", "runs")


def _imports(package: str) -> dict[str, set[str]]:
    """Module (within the package) -> the seam modules it imports (``steady``, ``runs``,
    core's ``servesim.fast.steady`` / ``servesim.fast.runs`` as ``core.steady`` / ``core.runs``)."""
    src = ROOT / "plugins" / package.removeprefix("servesim_") / "src"
    out: dict[str, set[str]] = {}
    for module, path in _modules(src).items():
        if not module.startswith(package + "."):
            continue
        names = set()
        for candidate in _imported(module, path):
            for name in candidate.split("|"):
                for seam in SEAM:
                    if name in (f"{package}.{seam}", f"{package}.fast.{seam}",
                                f"servesim.fast.{seam}") or name.startswith(
                            (f"{package}.{seam}.", f"servesim.fast.{seam}.")):
                        names.add(("core." if name.startswith("servesim.") else "") + seam)
        out[module.removeprefix(package + ".")] = names
    return out


@pytest.mark.parametrize("package", BACKENDS)
def test_fast_paths_are_entered_from_the_seam_only(package: str) -> None:
    entries, reference = BACKENDS[package]
    imports = _imports(package)
    assert reference <= set(imports), "a listed reference module is missing"
    runs = {m for m, names in imports.items() if "runs" in names}
    steady = {m for m, names in imports.items() if "steady" in names}
    assert runs == {"rank"}, "only the rank starts runs (execute_run/complete_run)"
    assert steady <= entries, f"{sorted(steady - entries)} reach the steady batch directly"
    # the reference pass's own modules know nothing of runs, in the backend or in core
    for module in reference:
        assert not imports[module] & {"runs", "core.runs", "core.steady"}, module


def test_sglang_run_head_belongs_to_its_runs() -> None:
    """SGLang's runs keep their queue-head check (``run_head.py``) to themselves."""
    src = ROOT / "plugins" / "sglang" / "src"
    users = {module for module, path in _modules(src).items()
             if any("servesim_sglang.run_head" in name.split("|") for name in _imported(module, path))}
    assert users == {"servesim_sglang.runs"}
