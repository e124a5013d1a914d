"""The cohort log (servesim.fast.cohorts.CohortLog) against the plain request log.

A replay with runs and without per-request token times logs each worker's steady batch as
one cohort; a replay forced to step logs every token. Randomised Mooncake workloads on every
backend (vLLM; SGLang, whose prefill passes run without the decoding batch; TRT-LLM under its
three policies), one to three workers, round-robin or KV routing, timestamp and concurrency
mode, timestamp mode with a cap on active sessions (``max_concurrency``): the report JSON and
the per-request lines must be byte-identical.
"""

from __future__ import annotations

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
from servesim.report.stats import RequestLog
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.testing.strategies import mooncake_lines
from servesim.timing import PolynomialTiming
from servesim.workload.mooncake import MooncakeTrace
from servesim_sglang.rank import SglangRank
from servesim_trtllm.config import CapacitySchedulerPolicy, TrtllmConfig
from servesim_trtllm.rank import TrtllmRank
from servesim_vllm.rank import VllmRank

BACKENDS = ["vllm", "sglang", "trtllm-gne", "trtllm-mu", "trtllm-static"]


@st.composite
def cases(draw: Any) -> dict:
    return dict(
        lines=draw(mooncake_lines()),
        backend=draw(st.sampled_from(BACKENDS)),
        workers=draw(st.sampled_from([1, 1, 2, 3])),
        kv=draw(st.booleans()),
        concurrency=draw(st.sampled_from([None, None, 2])),
        cap=draw(st.sampled_from([None, None, 1, 2])),
        blocks=draw(st.sampled_from([30, 64, 4096])),
    )


def _factory(case: dict) -> EngineFactory:
    backend, kv = case["backend"], case["kv"]
    if backend == "vllm":
        cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=4)
        return EngineFactory(cfg, VllmRank, PolynomialTiming(), emit_kv_events=kv)
    if backend == "sglang":
        # Page size 1, as SGLang's default: the pool counts tokens.
        cfg = EngineConfig(backend="sglang", num_gpu_blocks=case["blocks"] * 4, block_size=1)
        return EngineFactory(cfg, SglangRank, PolynomialTiming(), emit_kv_events=kv)
    policy = {"trtllm-gne": CapacitySchedulerPolicy.GUARANTEED_NO_EVICT,
              "trtllm-mu": CapacitySchedulerPolicy.MAX_UTILIZATION,
              "trtllm-static": CapacitySchedulerPolicy.STATIC_BATCH}[backend]
    cfg = EngineConfig(backend="trtllm", num_gpu_blocks=case["blocks"], block_size=4)
    return EngineFactory(cfg, TrtllmRank, PolynomialTiming(), emit_kv_events=kv,
                         backend_config=TrtllmConfig(capacity_scheduler_policy=policy))


def _replay(case: dict, runs: bool) -> tuple[str, list[str]]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", 4)
    workers = case["workers"]
    router = (KvRouter if case["kv"] else RoundRobinRouter)(workers, 1, 4)
    factory = _factory(case)
    factory.engine_class = RunEngine
    rp = Replayer(build_engines(factory.build, workers), workload, router=router,
                  block_size=4, concurrency=case["concurrency"],
                  max_concurrency=case["cap"] if case["concurrency"] is None else None,
                  speed=FastOverlay(runs=runs))
    log = rp.run()
    assert type(log) is (CohortLog if runs else RequestLog)
    return dumps(build_report(log, ReportConfig())), list(per_request_lines(log))


@settings(max_examples=80, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_cohort_log_replays_are_byte_identical_to_stepping(case: dict) -> None:
    assert _replay(case, runs=True) == _replay(case, runs=False)


def _log_with_cohort() -> CohortLog:
    """Requests 0-2 on worker 0: first tokens at 10, then a run of passes ending at 20 and
    30 makes them a cohort (their last token at 30, three tokens each)."""
    log = CohortLog([8, 8, 8, 8])
    log.tokens([0, 1, 2], 10.0, 0)
    log.run_tokens([0, 1, 2], [], [20.0, 30.0], 10.0, None, 0)
    assert log.cohorts[0].ids == [0, 1, 2] and log.cohorts[0].t == 30.0
    return log


def test_a_pass_the_cohort_sits_out_leaves_it_in_place() -> None:
    """SGLang's prefill pass emits only the newcomer's first token: the cohort stays, and its
    next token's gap is measured from its own last token, not from that pass."""
    log = _log_with_cohort()
    assert log.tokens([3], 35.0, 0) == [3]
    assert 0 in log.cohorts
    log.tokens([0, 1, 2, 3], 41.0, 0)
    assert log.cohorts[0].n == 1 and log.cohorts[0].t == 41.0
    log.settle()
    assert log.ntok == [4, 4, 4, 2] and log.last == [41.0] * 4
    shared = sorted(zip(log.shared_gap, log.shared_weight, strict=True))
    assert (11.0, 3) in shared  # 41 - 30 for the cohort, once, weight 3
    # Individual: the first gaps ever (times to second token) of 0-2 (in the run) and of 3.
    assert list(log.itl) == [10.0, 10.0, 10.0, 6.0]


def test_a_member_missing_from_a_pass_dissolves_the_cohort() -> None:
    """A pass in which a member of the cohort does not emit (preempted, or held back by the
    token budget) writes the members' fields back and records the pass token by token."""
    log = _log_with_cohort()
    log.tokens([0, 2], 40.0, 0)
    assert 0 not in log.cohorts
    assert log.ntok[:3] == [4, 3, 4] and log.last[:3] == [40.0, 30.0, 40.0]
    assert list(log.itl_rid)[-2:] == [0, 2]
