"""The conformance library itself: traces, prompts, oracle options and the step comparison."""

from __future__ import annotations

import pytest
from servesim.contract import ScheduleRecord
from servesim_vllm.conformance import (
    OracleOptions,
    PromptFactory,
    ScenarioSpec,
    compare_steps,
    make_trace,
    schedule_step,
)


def _step(i: int, scheduled: dict[str, int], **kw: object) -> dict[str, object]:
    base: dict[str, object] = {"step": i, "scheduled": scheduled, "new_hits": {}, "resumed": {},
                               "preempted": [], "finished": [], "running": 1, "waiting": 0,
                               "free_blocks": 10}
    base.update(kw)
    return base


def test_make_trace_is_deterministic_and_shares_group_prefixes() -> None:
    spec = ScenarioSpec(name="t", n=50, isl=(100, 300), osl=(1, 9), prefix_groups=2,
                        prefix_frac=1.0, prefix_ratio=0.8, seed=3,
                        options=OracleOptions(hash_block_tokens=32))
    rows = make_trace(spec)
    assert rows == make_trace(spec)
    assert [r["timestamp"] for r in rows] == list(range(50))
    for r in rows:
        assert len(r["hash_ids"]) == -(-r["input_length"] // 32)
        assert 100 <= r["input_length"] <= 300 and 1 <= r["output_length"] <= 9
        # every request is in a group: its chain starts at a group root (id % 10000 == 0)
        assert r["hash_ids"][0] % 10_000 == 0 and r["hash_ids"][0] < 1_000_000
    # unshared ids never repeat across requests
    tails = [h for r in rows for h in r["hash_ids"] if h >= 1_000_000]
    assert len(tails) == len(set(tails))


def test_prompts_share_exactly_the_blocks_whose_hash_ids_agree() -> None:
    pf = PromptFactory(hash_block_tokens=32)
    a = pf.prompt(0, {"input_length": 100, "hash_ids": [7, 8, 9, 10]})
    b = pf.prompt(1, {"input_length": 90, "hash_ids": [7, 8, 5, 6]})
    c = pf.prompt(2, {"input_length": 40, "hash_ids": [7]})  # tail beyond hash ids: unique
    assert len(a) == 100 and len(b) == 90 and len(c) == 40
    sa, _ = a.block_hashes(16)
    sb, _ = b.block_hashes(16)
    sc, _ = c.block_hashes(16)
    assert sa[:4] == sb[:4] and sa[4] != sb[4]  # hash ids 7, 8 = 64 tokens = 4 blocks of 16
    assert sc[:2] == sa[:2]  # 32 tokens of hash id 7, then a unique tail
    assert a.tokens(0, 32) == c.tokens(0, 32) and a.tokens(32, 40) != c.tokens(32, 40)


def test_oracle_options_map_to_argv_and_engine_config() -> None:
    opts = OracleOptions(num_gpu_blocks=60, max_num_seqs=8, max_num_batched_tokens=256,
                         chunked_prefill=False, prefix_caching=False, admit="stepwise", per_step=2)
    argv = opts.argv()
    assert "--num-gpu-blocks=60" in argv and "--no-chunked-prefill" in argv
    assert "--no-prefix-caching" in argv and "--admit=stepwise" in argv and "--per-step=2" in argv
    rows = [{"input_length": 100, "output_length": 20}, {"input_length": 50, "output_length": 0}]
    cfg = opts.engine_config(rows)
    # the oracle's default max_model_len: longest prompt + max(1, output)
    assert cfg.max_model_len == 120 and cfg.num_gpu_blocks == 60 and cfg.block_size == 16
    assert not cfg.enable_chunked_prefill and not cfg.enable_prefix_caching
    assert OracleOptions.from_json(opts.to_json()) == opts


def test_schedule_step_uses_pass_log_shape() -> None:
    rec = ScheduleRecord(scheduled={3: 1, 8: 25}, new_hits={8: 224}, resumed=[8], preempted=[2],
                         finished=[3], running=1, waiting=4, free_blocks=9)
    step = schedule_step(5, ["9"], rec)
    assert step == {"step": 5, "admitted": ["9"], "scheduled": {"3": 1, "8": 25}, "new_hits": {},
                    "resumed": {"8": 224}, "preempted": ["2"], "finished": ["3"], "running": 1,
                    "waiting": 4, "free_blocks": 9}


def test_compare_counts_identical_steps_and_reports_first_divergence() -> None:
    oracle = [_step(0, {"0": 16, "1": 4}), _step(1, {"0": 1, "1": 1}), _step(2, {"1": 1}),
              _step(3, {})]
    same = [dict(s) for s in oracle]
    assert compare_steps(oracle, same).percent == 100.0
    reordered = [dict(s) for s in oracle]
    reordered[1] = _step(1, {"1": 1, "0": 1})  # batch order matters
    reordered[2] = _step(2, {"1": 1}, free_blocks=11)
    cmp = compare_steps(oracle, reordered[:3])  # and the trailing step is missing
    assert (cmp.total, cmp.identical, cmp.first_divergence) == (4, 1, 1)
    assert cmp.differing_fields == ["scheduled"]
    assert cmp.oracle_line["scheduled"] == {"0": 1, "1": 1}
    assert "first divergence at step 1" in cmp.describe()
    assert cmp.percent == pytest.approx(25.0)


def test_compare_ignores_order_of_id_sets_but_not_their_content() -> None:
    a = [_step(0, {"0": 1}, preempted=["10", "9"], finished=["2", "1"])]
    b = [_step(0, {"0": 1}, preempted=["9", "10"], finished=["1", "2"])]
    assert compare_steps(a, b).identical == 1
    c = [_step(0, {"0": 1}, preempted=["9"], finished=["1", "2"])]
    assert compare_steps(a, c).differing_fields == ["preempted"]


def test_rows_the_oracle_skips_are_not_submitted() -> None:
    rank_mod = pytest.importorskip("servesim_vllm.rank")
    from servesim_vllm.conformance import build_engine, run_servesim

    rows = [{"input_length": 40, "output_length": 10, "hash_ids": [1]},
            {"input_length": 60, "output_length": 30, "hash_ids": [2]},  # 90 > max_model_len
            {"input_length": 20, "output_length": 2, "hash_ids": [3]}]
    opts = OracleOptions(num_gpu_blocks=50, max_model_len=64, hash_block_tokens=64)
    steps = run_servesim(build_engine(rank_mod.VllmRank, rows, opts), rows, opts)
    assert steps[0]["admitted"] == ["0", "2"]
    assert steps[0]["scheduled"] == {"0": 40, "2": 20}
    assert all("1" not in s["scheduled"] for s in steps)


def test_golden_traces_are_the_scenario_definitions() -> None:
    """The checked-in traces and oracle options are what benchmarks/conformance/scenarios.py
    generates, so regenerating the goldens reproduces the same inputs."""
    import importlib.util
    import json
    from pathlib import Path

    from servesim_vllm.conformance import golden_dirs, load_golden

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "conformance_scenarios", root / "benchmarks" / "conformance" / "scenarios.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    by_name = {s.name: s for s in mod.GOLDEN}
    golden = root / "tests" / "golden" / "vllm_oracle"
    dirs = golden_dirs(golden)
    assert sorted(d.name for d in dirs) == sorted(by_name)
    for d in dirs:
        rows, opts, _steps = load_golden(d)
        assert rows == make_trace(by_name[d.name]), d.name
        assert opts == by_name[d.name].options, d.name
        meta = json.loads((d / "options.json").read_text())
        assert meta["vllm_version"] == "0.32.0" and meta["summary"]["aborted"] == []
