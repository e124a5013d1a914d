"""docs/eviction.md's tables are what ``benchmarks/eviction_table.py`` prints (the script that
also draws the page's figures from the same replays), so the figures, the tables and the
prose cannot drift apart."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "eviction.md").read_text()


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eviction_table", ROOT / "benchmarks" / "eviction_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_strategy_table_is_the_scripts() -> None:
    script = _script()
    table = script.table(script.replays(120))
    assert table.count("\n") == 13 and table in PAGE


def _sweep_rows() -> dict[int, list[str]]:
    header = next(line for line in PAGE.splitlines() if line.startswith("| `num_gpu_blocks` |"))
    start = PAGE.index(header)
    lines = PAGE[start : PAGE.index("\n\n", start)].splitlines()[2:]
    return {int(line.split("|")[1]): [c.strip() for c in line.split("|")[2:-1]] for line in lines}


def test_the_pool_sweep_table_is_the_scripts() -> None:
    script = _script()
    rows = _sweep_rows()
    assert tuple(rows) == script.SWEEP_BLOCKS
    # The whole sweep is 32 replays: its ends are replayed here, and its 160-block row is the
    # strategy table's TRT-LLM rows (the same replays).
    for blocks in (script.SWEEP_BLOCKS[0], script.SWEEP_BLOCKS[-1]):
        swept = [script.replay_under(script.SWEEP_BACKEND, p, f"engine.num_gpu_blocks={blocks}")
                 for p in script.POLICIES]
        assert rows[blocks] == [f"{r['prefix_cache_hit_rate']:.3f}" for r in swept]
    trtllm = [line.split("|") for line in PAGE.splitlines() if line.startswith("| trtllm |")]
    assert [c[2].strip() for c in trtllm] == list(script.POLICIES)
    assert rows[160] == [f"{float(c[3]):.3f}" for c in trtllm]
