"""The opt-in compiled build (``SERVESIM_COMPILE=1``, docs/performance.md "Compiled build").

Once per suite run, a module-scoped fixture builds core and the three backends with mypyc into
wheels (from a copy of the source tree, so no build output lands in the checkout), installs them
with the interpreted plugins into a fresh virtual environment, and then:

* replays fixed scenarios (every backend, several workers, KV routing, preemption, a
  prefill/decode split, KV-event and FPM sinks, per-request lines) with both the interpreted
  and the compiled package and compares every output file byte for byte;
* runs a representative part of the suite against the compiled package: the runs-against-
  stepping hypothesis tests of every backend, the golden and conformance data, the eviction
  plugins (interpreted subclasses of compiled classes) and the replay tests.

The compiled modules are the ones each distribution's ``[tool.servesim-build] compile`` lists;
the C code is built at ``-O0`` here (the semantics are mypyc's, not the C optimiser's), which
keeps the build within the suite's time budget. ``-m "not compiled"`` skips the module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPILED = ["core", "plugins/vllm", "plugins/sglang", "plugins/trtllm"]
INTERPRETED = ["plugins/lineage", "plugins/multi_lru", "plugins/lfu", "docs/examples/servesim-toy"]
#: Test paths run against the compiled package (relative to the repository root).
SUBSET = [
    "plugins/vllm/tests",
    "plugins/sglang/tests",
    "plugins/trtllm/tests",
    "plugins/lfu/tests",
    "plugins/lineage/tests",
    "plugins/multi_lru/tests",
    "tests/golden",
    "tests/replay",
    "tests/kv",
    "tests/core/test_contract.py",
    "tests/core/test_engine.py",
    "tests/core/test_timing.py",
    "tests/core/test_config.py",
    "tests/plugin_kinds/test_pass_shape.py",
    "tests/plugin_kinds/test_check_kits.py",
]
SCENARIOS: dict[str, list[str]] = {
    "vllm_kv4_preempt": ["--set", "cluster.workers=4", "--set", "cluster.router=kv",
                         "--set", "engine.num_gpu_blocks=200"],
    # The sinks' writer process (servesim.fast.sink_offload) behind the compiled driver.
    "vllm_kv4_writer_process": ["--set", "cluster.workers=4", "--set", "cluster.router=kv",
                                "--set", "engine.num_gpu_blocks=200", "--set", "sinks.writer=process"],
    "sglang_2w": ["--set", "engine.backend=sglang", "--set", "cluster.workers=2"],
    "trtllm_1w": ["--set", "engine.backend=trtllm"],
    "vllm_disagg": ["--set", "cluster.prefill_workers=1", "--set", "cluster.decode_workers=2",
                    "--set", "cluster.router=kv"],
}
WORKLOAD = ["--set", "workload.synthetic.num_requests=120",
            "--set", "workload.synthetic.turns_per_session=2"]
SINKS = ["--set", "sinks.kv_events=[{type: jsonl, path: kv.jsonl}]",
         "--set", "sinks.fpm=[{type: jsonl, path: fpm.jsonl}]"]

pytestmark = [
    pytest.mark.compiled,
    pytest.mark.skipif(os.environ.get("SERVESIM_COMPILED_SUITE") == "1",
                       reason="already running inside the compiled package's suite"),
]


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def _copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".mypy_cache", "tests")
    for rel in [*COMPILED, *INTERPRETED]:
        shutil.copytree(ROOT / rel, dst / rel, ignore=ignore, symlinks=True)


def _build_wheels(src: Path, wheels: Path) -> None:
    env = {**os.environ, "SERVESIM_COMPILE": "1", "SERVESIM_COMPILE_OPT": "0"}
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
           "-w", str(wheels)]
    # The four compilations are independent: run them side by side.
    procs = [subprocess.Popen([*pip, str(src / rel)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rel in COMPILED]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    for rel, p, log in zip(COMPILED, procs, logs, strict=True):
        assert p.returncode == 0, f"compiling {rel} failed:\n{log[-4000:]}"
    _run([*pip, *(str(src / rel) for rel in INTERPRETED)], env={**os.environ})


@pytest.fixture(scope="module")
def compiled_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which(sysconfig.get_config_var("CC").split()[0]) is None:
        pytest.skip("no C compiler for mypyc")
    pytest.importorskip("mypyc.build", reason="mypy (mypyc) is not installed")
    tmp = tmp_path_factory.mktemp("compiled")
    _copy_tree(tmp / "src")
    wheels = tmp / "wheels"
    _build_wheels(tmp / "src", wheels)
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", *map(str, sorted(wheels.glob("*.whl"))),
          "pytest", "hypothesis"])
    yield python


def _is_compiled(python: Path, module: str) -> bool:
    out = _run([str(python), "-c", f"import {module} as m; print(m.__file__)"])
    return out.stdout.strip().endswith(".so")


def test_the_hot_modules_are_compiled_and_the_default_install_is_not(compiled_python: Path) -> None:
    for module in ["servesim.kv.pool", "servesim.replay.driver", "servesim_vllm.scheduler",
                   "servesim_sglang.scheduler", "servesim_trtllm.core",
                   "servesim_vllm.fast.steady", "servesim_trtllm.fast.steady", "servesim.timing.builtin",
                   "servesim.fast.run_pending"]:
        assert _is_compiled(compiled_python, module), module
    # Classes plugins subclass stay interpreted or accept interpreted subclasses.
    assert not _is_compiled(compiled_python, "servesim.rank")
    assert not _is_compiled(Path(sys.executable), "servesim.kv.pool")


def _outputs(servesim: Path, where: Path, args: list[str]) -> dict[str, bytes]:
    where.mkdir(parents=True)
    _run([str(servesim), "run", "--quiet", "--output-json", "report.json",
          "--per-request", "req.jsonl", *WORKLOAD, *SINKS, *args], cwd=where)
    return {p.name: p.read_bytes() for p in sorted(where.iterdir())}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_reports_and_sink_files_are_byte_identical(compiled_python: Path, tmp_path: Path,
                                                    name: str) -> None:
    interpreted = Path(sys.executable).parent / "servesim"
    compiled = compiled_python.parent / "servesim"
    a = _outputs(interpreted, tmp_path / "interpreted", SCENARIOS[name])
    b = _outputs(compiled, tmp_path / "compiled", SCENARIOS[name])
    assert sorted(a) == ["fpm.jsonl", "kv.jsonl", "report.json", "req.jsonl"]
    assert all(a[k] for k in a)
    for key in a:
        assert a[key] == b[key], f"{name}: {key} differs between interpreted and compiled"


def test_the_suite_subset_passes_against_the_compiled_package(compiled_python: Path) -> None:
    env = {**os.environ, "SERVESIM_COMPILED_SUITE": "1"}
    out = subprocess.run([str(compiled_python), "-m", "pytest", "-q", "-x", "-p", "no:randomly",
                          *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1]
