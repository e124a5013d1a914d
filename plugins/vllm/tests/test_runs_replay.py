"""The Replayer with runs of passes (servesim.fast.replay_runs) against forced stepping.

Randomised Mooncake workloads (single- and multi-turn sessions, timestamp and concurrency
mode) on vLLM workers, round-robin or KV routing: the report JSON and per-request lines must
be byte-identical, and the KV-event and FPM sink streams too (always with one worker; with
several, when drawn: their output is merged in an order runs cannot change).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.sections import ReportConfig
from servesim.factory import EngineFactory
from servesim.fast.cohorts import CohortLog
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
from servesim_vllm.rank import VllmRank

BLOCK = 4


@st.composite
def cases(draw: Any) -> dict:
    lines = draw(mooncake_lines())
    return dict(
        lines=lines,
        workers=draw(st.sampled_from([1, 1, 2, 3])),
        kv=draw(st.booleans()),
        concurrency=draw(st.sampled_from([None, None, 2])),
        blocks=draw(st.sampled_from([30, 64, 4096])),
        caching=draw(st.booleans()),
        sinks=draw(st.booleans()),
    )


def _replay(case: dict, runs: bool, token_times: bool = True) -> tuple[str, list[str], list, list]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", BLOCK)
    workers = case["workers"]
    router_cls = KvRouter if case["kv"] else RoundRobinRouter
    router = router_cls(workers, 1, BLOCK)
    sinks = workers == 1 or case.get("sinks", False)
    kv_sink, fpm_sink = MemoryKvEventSink(), MemoryFpmSink()
    cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=BLOCK,
                       enable_prefix_caching=case["caching"])
    factory = EngineFactory(cfg, VllmRank, PolynomialTiming(),
                            emit_kv_events=sinks or case["kv"], emit_forward_pass_metrics=sinks)
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, workers), workload, router=router,
                  block_size=BLOCK, concurrency=case["concurrency"],
                  kv_sinks=[kv_sink] if sinks else [], fpm_sinks=[fpm_sink] if sinks else [],
                  record_token_times=token_times, speed=FastOverlay(runs=runs))
    log = rp.run()
    # Without token times, runs log each worker's steady batch as a cohort.
    assert isinstance(log, CohortLog) == (runs and not token_times)
    report = dumps(build_report(log, ReportConfig()))
    return report, list(per_request_lines(log)), kv_sink.events, fpm_sink.metrics


@settings(max_examples=50, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_replay_with_runs_is_byte_identical(case: dict) -> None:
    step = _replay(case, runs=False)
    run = _replay(case, runs=True)
    assert step[0] == run[0]
    assert step[1] == run[1]
    assert step[2] == run[2]
    assert step[3] == run[3]


@settings(max_examples=50, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_replay_with_runs_and_cohorts_is_byte_identical(case: dict) -> None:
    """The same without per-request token times: the run replay's log keeps steady batches
    as cohorts (servesim.fast.cohorts); its report and settled per-request fields match."""
    step = _replay(case, runs=False, token_times=False)
    run = _replay(case, runs=True, token_times=False)
    assert step == run


def test_runs_take_most_passes_of_a_steady_replay() -> None:
    lines = [json.dumps({"timestamp": i * 50, "hash_ids": [i * 10, i * 10 + 1],
                         "output_length": 60}) for i in range(6)]
    case = dict(lines=lines, workers=1, kv=False, concurrency=None, blocks=4096, caching=True)
    workload = MooncakeTrace.parse_lines(lines, "t.jsonl", BLOCK)
    factory = EngineFactory(EngineConfig(block_size=BLOCK), VllmRank, PolynomialTiming())
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, 1), workload, block_size=BLOCK,
                  speed=FastOverlay(runs=True))
    runs = rp.run_driver  # its RunDriver
    assert runs is not None
    rp.run()
    calls = [runs.run_passes]  # passes inside runs
    assert rp.log.ntok == [60] * 6
    # 6 prefills step; every other pass (354 decode passes' worth) is inside a run.
    assert sum(calls) == rp.passes - 6
    assert sum(calls) > 0.9 * rp.passes
    assert _replay(case, True)[0] == _replay(case, False)[0]


def test_runs_through_completions_retire_before_the_next_arrival() -> None:
    """Staggered outputs on two KV-routed workers: runs continue through completions, and the
    requests they completed are retired at their own boundary before a later arrival is
    routed (router load and ``max_concurrent_requests`` as stepping), byte-identical."""
    lines = [json.dumps({"timestamp": i * 3, "hash_ids": [i * 10, i * 10 + 1],
                         "output_length": 12 + 9 * i}) for i in range(6)]
    lines.append(json.dumps({"timestamp": 700, "hash_ids": [1, 2], "output_length": 5}))
    case = dict(lines=lines, workers=2, kv=True, concurrency=None, blocks=4096, caching=True)
    workload = MooncakeTrace.parse_lines(lines, "t.jsonl", BLOCK)
    factory = EngineFactory(EngineConfig(block_size=BLOCK), VllmRank, PolynomialTiming(),
                            emit_kv_events=True)
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, 2), workload, router=KvRouter(2, 1, BLOCK),
                  block_size=BLOCK, speed=FastOverlay(runs=True))
    runs = rp.run_driver  # its RunDriver
    assert runs is not None
    rp.run()
    assert runs.completed_within >= 3  # completions inside runs, not at their ends
    assert _replay(case, True)[:2] == _replay(case, False)[:2]


def test_a_run_stops_for_a_worker_starting_a_pass_at_the_same_time() -> None:
    """Concurrency mode, two round-robin workers becoming ready at the same time: worker 0's
    run must not extend past the first pass, because worker 1 starts its pass only after it
    (in worker order) and that pass's completion releases a session whose turn goes to
    worker 0. Before the fix this replay stopped with an internal error."""
    lines = [json.dumps({"timestamp": 0, "hash_ids": [0], "output_length": n})
             for n in (3, 2, 1, 1, 1)]
    case = dict(lines=lines, workers=2, kv=False, concurrency=2, blocks=30, caching=False)
    for token_times in (True, False):
        assert _replay(case, True, token_times) == _replay(case, False, token_times)
