"""The Replayer with trtllm runs of passes against forced stepping (``FastOverlay(runs=False)``, as
``SERVESIM_RUNS=0`` does).

Randomised Mooncake workloads (single- and multi-turn sessions, concurrency mode) on trtllm
workers under every capacity policy, tight and roomy pools, round-robin or KV routing: the
report JSON and per-request lines must be byte-identical, and with one worker the KV-event and
FPM sink streams too.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.sections import ReportConfig
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.overlay import FastOverlay
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter, RoundRobinRouter
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.sinks.builtin import MemoryFpmSink, MemoryKvEventSink
from servesim.testing.strategies import mooncake_lines
from servesim.timing import PolynomialTiming
from servesim.workload.mooncake import MooncakeTrace
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank

BLOCK = 4


@st.composite
def cases(draw: Any) -> dict:
    lines = draw(mooncake_lines())
    return dict(
        lines=lines,
        policy=draw(st.sampled_from(list(CapacitySchedulerPolicy))),
        workers=draw(st.sampled_from([1, 1, 2])),
        kv=draw(st.booleans()),
        concurrency=draw(st.sampled_from([None, None, 2])),
        blocks=draw(st.sampled_from([30, 64, 4096])),
        caching=draw(st.booleans()),
        chunked=draw(st.booleans()),
        overlap=draw(st.booleans()),
    )


def _replay(case: dict, runs: bool) -> tuple[str, list[str], list, list]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", BLOCK)
    workers = case["workers"]
    router_cls = KvRouter if case["kv"] else RoundRobinRouter
    router = router_cls(workers, 1, BLOCK)
    sinks = workers == 1
    kv_sink, fpm_sink = MemoryKvEventSink(), MemoryFpmSink()
    cfg = EngineConfig(backend="trtllm", num_gpu_blocks=case["blocks"], block_size=BLOCK,
                       enable_prefix_caching=case["caching"],
                       enable_chunked_prefill=case["chunked"])
    trt = TrtllmConfig(capacity_scheduler_policy=case["policy"],
                       disable_overlap_scheduler=not case.get("overlap", False))
    factory = EngineFactory(cfg, TrtllmRank, PolynomialTiming(), backend_config=trt,
                            emit_kv_events=sinks or case["kv"], emit_forward_pass_metrics=sinks)
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, workers), workload, router=router,
                  block_size=BLOCK, concurrency=case["concurrency"],
                  kv_sinks=[kv_sink] if sinks else [], fpm_sinks=[fpm_sink] if sinks else [],
                  record_token_times=True, speed=FastOverlay(runs=runs))
    log = rp.run()
    report = dumps(build_report(log, ReportConfig()))
    return report, list(per_request_lines(log)), kv_sink.events, fpm_sink.metrics


@settings(max_examples=60, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_replay_with_runs_is_byte_identical(case: dict) -> None:
    step = _replay(case, runs=False)
    run = _replay(case, runs=True)
    assert step[0] == run[0]
    assert step[1] == run[1]
    assert step[2] == run[2]
    assert step[3] == run[3]


def test_runs_take_most_passes_of_a_steady_replay() -> None:
    lines = [json.dumps({"timestamp": i * 50, "hash_ids": [i * 10, i * 10 + 1],
                         "output_length": 60}) for i in range(6)]
    workload = MooncakeTrace.parse_lines(lines, "t.jsonl", BLOCK)
    factory = EngineFactory(EngineConfig(backend="trtllm", block_size=BLOCK), TrtllmRank,
                            PolynomialTiming())
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, 1), workload, block_size=BLOCK,
                  speed=FastOverlay(runs=True))
    runs = rp.run_driver  # its RunDriver
    assert runs is not None
    rp.run()
    calls = [runs.run_passes]  # passes inside runs
    assert rp.log.ntok == [60] * 6
    # 6 context passes step; every other pass is inside a run.
    assert sum(calls) == rp.passes - 6
    assert sum(calls) > 0.9 * rp.passes
    case = dict(lines=lines, policy=CapacitySchedulerPolicy.GUARANTEED_NO_EVICT, workers=1,
                kv=False, concurrency=None, blocks=4096, caching=True, chunked=True)
    assert _replay(case, True) == _replay(case, False)
