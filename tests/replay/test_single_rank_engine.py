"""A dp_size-1 :class:`servesim.engine.Engine` takes a direct path through its one rank
(execute/complete/is_ready); forcing it back onto the group path must change nothing a
replay reports, with runs of passes on or off, with or without the KV router."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servesim.config.engine import EngineConfig
from servesim.config.sections import ReportConfig
from servesim.factory import EngineFactory
from servesim.fast.engine_runs import RunEngine
from servesim.fast.event_readers import EventReaders, hand_readers
from servesim.fast.overlay import FastOverlay
from servesim.replay.cluster import build_engines
from servesim.replay.driver import Replayer
from servesim.replay.routers import KvRouter, RoundRobinRouter
from servesim.report.summary import build_report, dumps, per_request_lines
from servesim.testing.strategies import mooncake_lines
from servesim.timing import PolynomialTiming
from servesim.workload.mooncake import MooncakeTrace
from servesim_vllm.rank import VllmRank


def _replay(case: dict, single: bool) -> tuple[str, list[str], int, list[int]]:
    workload = MooncakeTrace.parse_lines(case["lines"], "t.jsonl", 4)
    workers, kv = case["workers"], case["kv"]
    router = (KvRouter if kv else RoundRobinRouter)(workers, 1, 2)
    cfg = EngineConfig(num_gpu_blocks=case["blocks"], block_size=2, max_num_seqs=4,
                       max_num_batched_tokens=16)
    factory = EngineFactory(cfg, VllmRank, PolynomialTiming(), emit_kv_events=kv)
    if kv:
        hand_readers(factory, EventReaders(kv_router_only=True))
    factory.engine_class = RunEngine
    engines = build_engines(factory.build, workers)
    if not single:
        for e in engines:
            e._single = None  # noqa: SLF001 - the group path, as for dp_size > 1
    rp = Replayer(engines, workload, router=router, block_size=2, speed=FastOverlay(runs=case["runs"]),
                  record_token_times=True)
    log = rp.run()
    waves = [e._wave_step for e in engines]  # noqa: SLF001
    return dumps(build_report(log, ReportConfig())), list(per_request_lines(log)), rp.passes, waves


@st.composite
def cases(draw: Any) -> dict:
    return dict(
        lines=draw(mooncake_lines()),
        workers=draw(st.sampled_from([1, 2])),
        kv=draw(st.booleans()),
        runs=draw(st.booleans()),
        blocks=draw(st.sampled_from([10, 24, 4096])),  # small pools preempt
    )


@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_single_rank_path_is_the_group_path(case: dict) -> None:
    assert _replay(case, single=True) == _replay(case, single=False)
