"""Same config, workload and seed give identical report bytes for every eviction policy on
every backend (a pool of about 12,800 tokens under 40 prompts of up to 2,048) and for the
aic timing model."""

from __future__ import annotations

import pytest
from servesim.cli.main import main

#: KV blocks that hold about 12,800 tokens at each backend's block size (64, 1, 32).
TIGHT_BLOCKS = {"vllm": 200, "sglang": 12800, "trtllm": 400}


def _report(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["run", *argv, "--json"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("policy", ["lru", "lineage", "multi_lru", "lfu"])
def test_eviction_policies_repeat_their_bytes(capsys: pytest.CaptureFixture[str], policy: str,
                                             backend: str) -> None:
    argv = ["--set", "workload.synthetic.num_requests=40", "--set",
            f"engine.num_gpu_blocks={TIGHT_BLOCKS[backend]}", "--set",
            f"engine.eviction_policy={policy}", "--set", f"engine.backend={backend}"]
    first = _report(capsys, argv)
    assert '"completed": 40' in first
    assert _report(capsys, argv) == first


def test_aic_repeats_its_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--set", "workload.synthetic.num_requests=20",
            "--set", "engine.timing_model={type: aic, model: Qwen/Qwen3-32B}"]
    first = _report(capsys, argv)
    assert '"completed": 20' in first
    assert _report(capsys, argv) == first
