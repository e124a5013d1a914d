"""``servesim run --pass-log``: the pass log of a burst replay equals vLLM's own steps.

With every arrival at t=0 the replay delivers all requests before its first pass, as the
oracle's ``--admit all`` does, so the CLI's pass log of a golden trace must reproduce the
golden oracle steps line for line (``engine.vllm.profile: vllm-0.32``).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from servesim.cli.main import main
from servesim.replay.passlog import read_pass_log
from servesim_vllm.conformance import compare_steps, load_golden, write_jsonl

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vllm_oracle"
rank_mod = pytest.importorskip("servesim_vllm.rank")
if "profile" not in attrs.fields_dict(rank_mod.VllmRank.config_class):
    pytest.skip("engine.vllm has no behaviour settings yet", allow_module_level=True)


def _config(tmp: Path, name: str) -> tuple[Path, list[dict]]:
    rows, opts, steps = load_golden(GOLDEN / name)
    assert opts.admit == "all"
    write_jsonl(tmp / "trace.jsonl", [{**r, "timestamp": 0} for r in rows])
    cfg = opts.engine_config(rows)
    yaml = f"""
engine:
  backend: vllm
  block_size: {cfg.block_size}
  num_gpu_blocks: {cfg.num_gpu_blocks}
  max_num_seqs: {cfg.max_num_seqs}
  max_num_batched_tokens: {cfg.max_num_batched_tokens}
  max_model_len: {cfg.max_model_len}
  enable_chunked_prefill: {str(cfg.enable_chunked_prefill).lower()}
  enable_prefix_caching: {str(cfg.enable_prefix_caching).lower()}
  vllm: {{profile: vllm-0.32}}
workload:
  trace: {{path: {tmp / 'trace.jsonl'}, trace_block_size: {opts.hash_block_tokens}}}
"""
    (tmp / "sim.yaml").write_text(yaml)
    return tmp / "sim.yaml", steps


@pytest.mark.parametrize("name", ["preempt_small_pool", "no_chunk_preempt"])
def test_cli_pass_log_reproduces_oracle_steps(tmp_path: Path, name: str) -> None:
    config, steps = _config(tmp_path, name)
    log = tmp_path / "passes.jsonl"
    assert main(["run", str(config), "--pass-log", str(log), "--quiet"]) == 0
    lines = read_pass_log(log)
    assert [ln.pass_index for ln in lines] == list(range(len(lines)))
    assert all(ln.worker == 0 and ln.dp_rank == 0 for ln in lines)
    assert all(a.end_ms == b.start_ms for a, b in zip(lines, lines[1:], strict=False))
    cmp = compare_steps(steps, [ln.to_json() for ln in lines])
    assert cmp.first_divergence is None, cmp.describe()


def test_no_pass_log_without_the_option(tmp_path: Path) -> None:
    config, _ = _config(tmp_path, "tight_token_budget")
    assert main(["run", str(config), "--quiet"]) == 0
    assert not (tmp_path / "passes.jsonl").exists()


def test_unwritable_pass_log_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = _config(tmp_path, "tight_token_budget")
    bad = tmp_path / "missing_dir_file" / "x"
    (tmp_path / "missing_dir_file").write_text("a file, not a directory")
    assert main(["run", str(config), "--pass-log", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "Traceback" not in err


SGLANG_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "sglang_oracle"


@pytest.mark.parametrize("name", ["prefix_burst_page16", "lof_policy", "overlap_page16"])
def test_cli_sglang_pass_log_has_the_oracle_fields_and_steps(tmp_path: Path, name: str) -> None:
    """The sglang rank's pass log carries the SGLang oracle's step fields under its names
    (servesim.replay.passlog.ENGINE_FIELDS) and, with ``profile: sglang-0.5.23``, its steps."""
    from servesim_sglang import conformance as sgc

    rows, opts, steps = sgc.load_golden(SGLANG_GOLDEN / name)
    assert opts.admit == "all"
    write_jsonl(tmp_path / "trace.jsonl", [{**r, "timestamp": 0} for r in rows])
    cfg = opts.engine_config()
    sg = {"profile": "sglang-0.5.23", **opts.backend_settings()}
    (tmp_path / "sim.yaml").write_text(f"""
engine:
  backend: sglang
  block_size: {cfg.block_size}
  num_gpu_blocks: {cfg.num_gpu_blocks}
  max_num_seqs: {cfg.max_num_seqs}
  sglang: {sg}
workload:
  trace: {{path: {tmp_path / 'trace.jsonl'}, trace_block_size: {opts.hash_block_tokens}}}
""")
    log = tmp_path / "passes.jsonl"
    assert main(["run", str(tmp_path / "sim.yaml"), "--pass-log", str(log), "--quiet"]) == 0
    lines = [ln.to_json() for ln in read_pass_log(log)]
    assert set(sgc.COMPARED_FIELDS) <= set(lines[0])
    cmp = sgc.compare_steps(steps, lines)
    assert cmp.first_divergence is None, cmp.describe()
