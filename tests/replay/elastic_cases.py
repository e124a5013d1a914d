"""Configurations shared by the elastic replay tests (servesim.replay.elastic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servesim.config.loader import load_config
from servesim.replay.runner import simulate

BASE = """
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 2000
  max_num_seqs: {seqs}
  timing_model: {{type: fixed, prefill_ms: 8.0, decode_ms: 2.0}}
workload:
  synthetic: {{num_requests: {n}, rate: {rate}, input_length: "uniform:64:512",
              output_length: "uniform:8:64", block_size: 16}}
cluster: {{workers: {workers}, router: {router}}}
"""


def load(tmp_path: Path, extra: str = "", *, n: int = 120, rate: float = 40.0, workers: int = 2,
         router: str = "kv", seqs: int = 256, name: str = "sim.yaml") -> Any:
    path = tmp_path / name
    base = BASE.format(n=n, rate=rate, workers=workers, router=router, seqs=seqs)
    if extra.startswith("cluster:"):  # the extra's cluster replaces the base's
        base = base[: base.index("cluster:")]
    path.write_text(base + extra)
    return load_config(str(path))


def run(tmp_path: Path, extra: str = "", **kw: Any) -> Any:
    record = kw.pop("record_token_times", False)
    return simulate(load(tmp_path, extra, **kw), record_token_times=record)


def planned_outputs(tmp_path: Path, **kw: Any) -> list[int]:
    """Each request's planned output length in the workload ``load`` builds."""
    from servesim.replay.runner import load_workload

    loaded = load(tmp_path, name="outputs.yaml", **kw)
    return [t.output_length for t in load_workload(loaded.sim.workload, loaded.plugins).turns()]


def accounting(report: dict[str, Any]) -> tuple[int, int, int, int]:
    req = report["elastic"]["requests"]
    return req["submitted"], req["completed"], req["failed"], req["rejected"]
