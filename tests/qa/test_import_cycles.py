"""No distribution has a runtime import cycle (imports under ``TYPE_CHECKING`` aside), and the
distributions in :data:`TYPED_ACYCLIC` have none even counting the ``TYPE_CHECKING`` imports: a
helper module types the object it is handed by an interface declared in a lower module, not by
importing its owner's module (docs/architecture.md).

The import graph is read from the source tree with :mod:`ast`: every ``import`` and ``from ...
import`` statement counts, at module level or inside a function (a lazy import still runs), except
those under ``if TYPE_CHECKING:`` (unless they are asked for). ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``; an edge to one of the module's own
parent packages is not a cycle (a parent package is always imported before its submodules run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = sorted(
    p for p in [ROOT / "core" / "src", *(ROOT / "plugins").glob("*/src")] if p.is_dir()
)
#: Distributions (folders under the repository root) without an import cycle even through their
#: ``TYPE_CHECKING`` imports.
TYPED_ACYCLIC = {"core", "plugins/vllm", "plugins/sglang", "plugins/trtllm"}


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(module: str, path: Path, type_checking: bool = False) -> Iterator[str]:
    """Dotted names this module imports at run time, and with ``type_checking`` also under
    ``if TYPE_CHECKING:`` (candidates; resolved by the caller)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    stack: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not type_checking and isinstance(child, ast.If) and _is_type_checking(child.test):
                stack.extend(child.orelse)
                continue
            if isinstance(child, ast.Import):
                yield from (a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package[: len(package) - (child.level - 1)]
                    base = ".".join([*parent, *([child.module] if child.module else [])])
                for alias in child.names:
                    yield f"{base}.{alias.name}|{base}"
            stack.append(child)


def _graph(modules: dict[str, Path], type_checking: bool = False) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported(module, path, type_checking):
            first, _, fallback = name.partition("|")
            target = first if first in modules else resolve(fallback or first)
            if target is None or target == module or module.startswith(target + "."):
                continue
            graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.mark.parametrize("src", SOURCE_ROOTS, ids=lambda p: p.parent.name)
def test_no_runtime_import_cycle(src: Path) -> None:
    assert _cycles(_graph(_modules(src))) == []


@pytest.mark.parametrize("distribution", sorted(TYPED_ACYCLIC))
def test_no_import_cycle_with_type_checking_imports(distribution: str) -> None:
    src = ROOT / distribution / "src"
    assert src in SOURCE_ROOTS
    assert _cycles(_graph(_modules(src), type_checking=True)) == []


def test_the_checker_finds_a_lazy_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (pkg / "d.py").write_text("from pkg.c import x\n")
    assert _cycles(_graph(_modules(tmp_path))) == [["pkg.a", "pkg.b"]]
    # counting the TYPE_CHECKING import of pkg.a, pkg.c joins no cycle (nothing imports it
    # back), but one more edge closes one
    assert _cycles(_graph(_modules(tmp_path), type_checking=True)) == [["pkg.a", "pkg.b"]]
    (pkg / "a.py").write_text("from pkg.b import f\nfrom pkg import d\n")
    assert _cycles(_graph(_modules(tmp_path))) == [["pkg.a", "pkg.b"]]
    assert _cycles(_graph(_modules(tmp_path), type_checking=True)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.d"]]
