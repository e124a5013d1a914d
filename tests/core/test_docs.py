"""Docs stay true: every hook documented with its exact signature, the README's two commands,
``.ci/run`` running the test command, and the example plugin matching its page and passing
the conformance kit (style-anchors.md rule 12, after datasette's ``tests/test_docs.py``)."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest
from servesim import hookspecs
from servesim.cli.main import main
from servesim.hookspecs import HOOK_KINDS
from servesim.plugins import make_plugin_manager

ROOT = Path(__file__).resolve().parents[2]
HOOKS_DOC = (ROOT / "docs" / "plugin-hooks.md").read_text()
PLUGIN_DOC = (ROOT / "docs" / "writing-a-plugin.md").read_text()
README = (ROOT / "README.md").read_text()
TOY = ROOT / "docs" / "examples" / "servesim-toy"

INSTALL_AND_RUN = "pip install ./core ./plugins/* && servesim run"
TEST_COMMAND = "pip install -r requirements-dev.txt && python -m pytest -q -n auto"


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", markdown, re.M | re.S)]


def spec_hooks() -> dict[str, str]:
    """Hook name → ``name(arg, ...)`` from the hookspec module itself."""
    out = {}
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("servesim_"):
            out[name] = f"{name}({', '.join(inspect.signature(fn).parameters)})"
    return out


def test_spec_module_and_plugin_manager_agree() -> None:
    pm_hooks = {n for n in dir(make_plugin_manager(autoload=False).hook) if n.startswith("servesim_")}
    assert pm_hooks == set(spec_hooks())
    assert set(HOOK_KINDS) <= pm_hooks  # registration hooks; the rest are documented below


@pytest.mark.parametrize("hook", sorted(spec_hooks()))
def test_hook_has_heading_with_exact_signature(hook: str) -> None:
    signature = spec_hooks()[hook]
    assert f"\n## `{signature}`\n" in HOOKS_DOC


def test_no_heading_for_a_hook_that_does_not_exist() -> None:
    documented = re.findall(r"^## `(\w+)\(", HOOKS_DOC, re.M)
    assert sorted(documented) == sorted(spec_hooks())


def test_readme_has_exactly_the_two_commands() -> None:
    blocks = code_blocks(README)
    assert blocks == [("sh", INSTALL_AND_RUN + "\n"), ("sh", TEST_COMMAND + "\n")]


def test_ci_runs_the_readme_test_command() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    lines = [ln for ln in script.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines == ["set -euo pipefail", 'cd "$(dirname "${BASH_SOURCE[0]}")/.."', TEST_COMMAND]
    assert script.read_text().startswith("#!/usr/bin/env bash\n")


def test_every_plugin_distribution_is_installed_for_the_tests() -> None:
    """The README's install line takes every folder under plugins/ (``./plugins/*``); the test
    install must name each one too, and pytest must collect each plugin's tests."""
    reqs = {line.split("#")[0].strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()}
    plugins = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file())
    assert len(plugins) >= 3
    assert [p for p in plugins if f"-e ./plugins/{p}" not in reqs] == []
    assert "./plugins/*" in INSTALL_AND_RUN


def test_requirements_install_the_example_plugin() -> None:
    reqs = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert any(line.split("#")[0].strip() == "-e ./docs/examples/servesim-toy" for line in reqs)


EXAMPLE_FILES = ("plugin.py", "paged.py", "timing.py", "roofline.py", "sinks.py", "router.py", "trace.py",
                 "observer.py")


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_plugin_page_shows_the_real_example_files(name: str) -> None:
    """The code on the page is the example's code, so the two cannot drift apart."""
    source = (TOY / "src" / "servesim_toy" / name).read_text()
    blocks = code_blocks(PLUGIN_DOC)
    assert ("python", source) in blocks
    pyproject = (TOY / "pyproject.toml").read_text()
    toml = [body for lang, body in blocks if lang == "toml"]
    assert toml == ['[project.entry-points.servesim]\ntoy = "servesim_toy.plugin"\n']
    assert toml[0] in pyproject


def test_plugin_page_config_example_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    yaml_block = [body for lang, body in code_blocks(PLUGIN_DOC) if lang == "yaml"][0]
    path = tmp_path / "sim.yaml"
    path.write_text(yaml_block)
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"OK: {path}: backend toy (block_size 16, dp_size 1), timing toy_constant"
    )
    (shown_error,) = [body for lang, body in code_blocks(PLUGIN_DOC)
                      if lang == "text" and "error" in body and "max_running" in body]
    path.write_text(yaml_block.replace("max_running: 2", "max_running: two"))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err == shown_error.replace("sim.yaml", str(path))


def test_example_plugin_passes_the_conformance_kit() -> None:
    from servesim.testing import ConformanceOptions, check_rank_conformance, engine_maker
    from servesim_toy import ToyRank

    # the toy keeps no KV cache: the kit's KV check then asks for no Stored event
    report = check_rank_conformance(engine_maker(ToyRank), options=ConformanceOptions(expect_kv_cache=False))
    assert report.failures == [] and len(report.checks) >= 9
    assert not check_rank_conformance(engine_maker(ToyRank), raise_on_failure=False).ok


def test_the_kit_code_on_the_plugin_page_runs() -> None:
    (block,) = [body for lang, body in code_blocks(PLUGIN_DOC)
                if lang == "python" and "def test_toy_ranks_conform" in body]
    namespace: dict[str, object] = {}
    exec(compile(block, "writing-a-plugin.md", "exec"), namespace)
    namespace["test_toy_ranks_conform"]()  # type: ignore[operator]


def test_readme_links_resolve() -> None:
    """Every relative link in the README points at a file or folder in the repository."""
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link
