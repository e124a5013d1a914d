"""With the KV router as the only event consumer the vLLM ranks coalesce removals and hash
generated blocks lazily (``EventReaders.kv_router_only``). The router must route
exactly as with the full event stream a KV event sink forces on."""

from __future__ import annotations

import json

from servesim.config.loader import load_config
from servesim.plugins import Plugins, make_plugin_manager
from servesim.replay.runner import simulate


def _trace(path) -> str:
    # Three prefix groups, long outputs and a small pool: evictions and preemptions happen,
    # and generated blocks fill the cache between arrivals.
    lines = [json.dumps({"timestamp": 2 * i, "input_length": 64 + 16 * (i % 4),
                         "output_length": 60 + 23 * (i % 5),
                         "hash_ids": [i % 3, 50 + i % 2, 100 + i]}) for i in range(40)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(tmp_path, trace: str, sink: bool | str) -> tuple[dict, list[int], int]:
    cfg = tmp_path / f"sim{sink}.yaml"
    sinks = "sinks:\n  kv_events: [{type: memory}]\n" if sink else ""
    if sink == "jsonl":  # compact records, whose unshared blocks the router's index skips
        sinks = f"sinks:\n  kv_events: [{{type: jsonl, path: {tmp_path / 'kv.jsonl'}}}]\n"
    cfg.write_text(f"""
engine:
  backend: vllm
  block_size: 16
  num_gpu_blocks: 30
  max_num_seqs: 8
  timing_model: {{type: fixed, prefill_ms: 9.0, decode_ms: 1.0}}
cluster:
  workers: 3
  router: kv
workload:
  trace: {{path: {trace}, trace_block_size: 32}}
{sinks}""")
    res = simulate(load_config(str(cfg), [], Plugins(make_plugin_manager())))
    rep = {k: v for k, v in res.report.items() if k != "config"}
    return rep, list(res.log.worker), res.passes


def test_router_only_events_route_as_the_full_stream(tmp_path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    lean = _run(tmp_path, trace, sink=False)
    full = _run(tmp_path, trace, sink=True)
    assert lean == full
    records = _run(tmp_path, trace, sink="jsonl")
    assert records == lean
    assert (tmp_path / "kv.jsonl").stat().st_size > 0
    assert lean[0]["completed"] == 40
    assert lean[0]["num_preemptions"] > 0  # the lazy hashes were re-keyed on the way
    assert sorted(set(lean[1])) == [0, 1, 2]
