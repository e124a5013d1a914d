"""docs/sweep.md's sweep files load as written, and its worked example is the checked-in one."""

from __future__ import annotations

import re
from pathlib import Path

from servesim.config.loader import load_config
from servesim_sweep.point import check_points
from servesim_sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "sweep.md"


def _yaml_blocks() -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```$", DOC.read_text(), re.M | re.S)


def _code(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_every_sweep_block_loads(tmp_path) -> None:
    (tmp_path / "base.yaml").write_text("{}\n")
    (tmp_path / "sweep-pd-base.yaml").write_text("{}\n")
    blocks = _yaml_blocks()
    assert len(blocks) == 2
    for body in blocks:
        path = tmp_path / "sweep.yaml"
        path.write_text(body)
        sweep = load_sweep(str(path))
        assert sweep.points and sweep.objectives.key == "output_throughput_per_gpu"


def test_the_worked_example_is_the_checked_in_sweep(monkeypatch) -> None:
    example = ROOT / "docs" / "examples" / "sweep-pd.yaml"
    assert _code(_yaml_blocks()[1]) == _code(example.read_text())
    monkeypatch.chdir(ROOT)  # the base names its trace relative to the repository
    sweep = load_sweep(str(example))
    assert len(sweep.points) == 10
    check_points(sweep, sweep.base)  # type: ignore[arg-type]
    loaded = load_config(str(sweep.base))
    assert loaded.sim.workload.trace is not None
    assert Path(loaded.sim.workload.trace.path).is_file()
