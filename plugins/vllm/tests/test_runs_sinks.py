"""Sinks on several workers keep runs of passes on (servesim.fast.sink_merge): the JSONL
KV-event and FPM files of a run replay are byte-identical to forced stepping's, and their
lines are in (time, pass start, worker, dp rank) order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.overlay import FastOverlay
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter, RoundRobinRouter
from servesim.sinks.builtin import JsonlFpmSink, JsonlKvEventSink, JsonlSinkConfig
from servesim.testing.strategies import mooncake_lines
from servesim.timing import PolynomialTiming
from servesim.workload.mooncake import MooncakeTrace
from servesim_vllm.rank import VllmRank

BLOCK = 4


def _replay(case: dict, runs: bool, out: Path) -> tuple[bytes, bytes, int]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", BLOCK)
    workers = case["workers"]
    router = (KvRouter if case["kv"] else RoundRobinRouter)(workers, 1, BLOCK)
    cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=BLOCK,
                       enable_prefix_caching=case["caching"], emit_kv_token_ids=case["ids"])
    factory = EngineFactory(cfg, VllmRank, PolynomialTiming(),
                            emit_kv_events=True, emit_forward_pass_metrics=True)
    kv_path, fpm_path = out / f"kv{runs}.jsonl", out / f"fpm{runs}.jsonl"
    kv = JsonlKvEventSink(JsonlSinkConfig(str(kv_path)))
    fpm = JsonlFpmSink(JsonlSinkConfig(str(fpm_path)))
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, workers), workload, router=router,
                  block_size=BLOCK, concurrency=case["concurrency"],
                  kv_sinks=[kv], fpm_sinks=[fpm], speed=FastOverlay(runs=runs))
    rp.run()
    kv.close()
    fpm.close()
    runs = rp.run_driver  # its RunDriver
    taken = 0 if runs is None else runs.count  # all runs completed
    assert taken == 0
    return kv_path.read_bytes(), fpm_path.read_bytes(), rp.passes


@st.composite
def cases(draw: Any) -> dict:
    return dict(
        lines=draw(mooncake_lines()),
        workers=draw(st.sampled_from([2, 3, 4])),
        kv=draw(st.booleans()),
        concurrency=draw(st.sampled_from([None, None, 2])),
        blocks=draw(st.sampled_from([30, 64, 4096])),
        caching=draw(st.booleans()),
        ids=draw(st.booleans()),
    )


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_sink_files_of_runs_equal_stepping(case: dict, tmp_path: Path) -> None:
    step = _replay(case, False, tmp_path)
    run = _replay(case, True, tmp_path)
    assert step[0] == run[0]
    assert step[1] == run[1]
    assert step[2] == run[2]


def test_runs_stay_on_with_sinks_and_lines_are_in_merge_order(tmp_path: Path) -> None:
    """Four KV-routed workers with both sinks: most passes are inside runs, and both files
    are sorted by time, then pass start (FPM lines carry it), then worker."""
    lines = [json.dumps({"timestamp": i * 7, "hash_ids": [i % 5, 100 + i],
                         "output_length": 40 + i % 9}) for i in range(40)]
    case = dict(lines=lines, workers=4, kv=True, concurrency=None, blocks=4096, caching=True,
                ids=True)
    workload = MooncakeTrace.parse_lines(lines, "t.jsonl", BLOCK)
    factory = EngineFactory(EngineConfig(block_size=BLOCK), VllmRank, PolynomialTiming(),
                            emit_kv_events=True, emit_forward_pass_metrics=True)
    kv = JsonlKvEventSink(JsonlSinkConfig(str(tmp_path / "k.jsonl")))
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, 4), workload, router=KvRouter(4, 1, BLOCK),
                  block_size=BLOCK, kv_sinks=[kv], speed=FastOverlay(runs=True))
    runs = rp.run_driver  # its RunDriver
    assert runs is not None
    rp.run()
    kv.close()
    assert runs.run_passes > 0.5 * rp.passes  # the passes committed inside runs
    step = _replay(case, False, tmp_path)
    run = _replay(case, True, tmp_path)
    assert step == run
    fpms = [json.loads(x) for x in run[1].splitlines()]
    assert len(fpms) == run[2]
    keys = [(r["at_ms"], round(r["at_ms"] - r["wall_time"] * 1000.0, 6), int(r["worker_id"]))
            for r in fpms]
    assert keys == sorted(keys) and len({k[2] for k in keys}) == 4
    events = [json.loads(x) for x in run[0].splitlines()]
    assert [e["at_ms"] for e in events] == sorted(e["at_ms"] for e in events)
    assert all("token_ids" in e for e in events if e["type"] == "BlockStored")


def test_kv_jsonl_sink_token_ids_on_request(tmp_path: Path) -> None:
    """``token_ids: true`` on the KV-event JSONL sink turns token materialisation on: each
    BlockStored line then carries block_size tokens per hash; by default (the engine's
    ``emit_kv_token_ids: false``) the lines have none, and the hashes are the same."""
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "hash_ids": [i % 3, 10 + i],
                                         "output_length": 5}) + "\n" for i in range(8)))
    sets = ["engine.block_size=4", f"workload.trace.path={json.dumps(str(trace))}",
            "workload.trace.trace_block_size=4", "cluster.workers=2",
            f'sinks.kv_events=[{{type: jsonl, path: "{tmp_path}/kv.jsonl"}}]']
    simulate(load_config(None, sets))
    plain = [json.loads(x) for x in (tmp_path / "kv.jsonl").read_text().splitlines()]
    assert plain and not any("token_ids" in e for e in plain)
    simulate(load_config(None, [*sets, "sinks.kv_events.0.token_ids=true"]))
    asked = [json.loads(x) for x in (tmp_path / "kv.jsonl").read_text().splitlines()]
    stored = [e for e in asked if e["type"] == "BlockStored"]
    assert [e["block_hashes"] for e in asked] == [e["block_hashes"] for e in plain]
    assert stored and all(len(e["token_ids"]) == 4 * len(e["block_hashes"]) for e in stored)
