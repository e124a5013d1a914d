"""Test helpers for servesim and for third-party backends.

* :func:`drive` — a minimal single-engine driver returning per-request traces;
* :func:`check_rank_conformance` / :class:`RankConformance` — the contract's invariants,
  checked against any rank class (see :mod:`servesim.testing.conformance`);
* :func:`check_eviction_policy` — the eviction contract's invariants, checked against any
  eviction policy (see :mod:`servesim.testing.eviction_kit`);
* check kits for the other plugin kinds, each failing with a list of what is wrong:
  :func:`check_timing_model` (:mod:`servesim.testing.timing_kit`), :func:`check_kv_event_sink`
  and :func:`check_fpm_sink` (:mod:`servesim.testing.sink_kit`), :func:`check_router`
  (:mod:`servesim.testing.router_kit`), :func:`check_planner`
  (:mod:`servesim.testing.planner_kit`), :func:`check_trace_format`
  (:mod:`servesim.testing.trace_kit`);
* the ``servesim`` pytest plugin (:mod:`servesim.testing.pytest_plugin`) adds fixtures.
"""

from servesim.testing.conformance import (
    CHECKS,
    ConformanceOptions,
    ConformanceReport,
    RankConformance,
    check_rank_conformance,
    default_workload,
    engine_maker,
)
from servesim.testing.driver import DriveResult, RequestTrace, drive
from servesim.testing.eviction_kit import EVICTION_CHECKS, check_eviction_policy
from servesim.testing.planner_kit import check_planner
from servesim.testing.router_kit import check_router
from servesim.testing.sink_kit import check_fpm_sink, check_kv_event_sink
from servesim.testing.timing_kit import check_timing_model
from servesim.testing.trace import Trace, kv_event_problems, run_trace
from servesim.testing.trace_kit import check_trace_format

__all__ = [
    "CHECKS",
    "ConformanceOptions",
    "ConformanceReport",
    "DriveResult",
    "EVICTION_CHECKS",
    "RankConformance",
    "RequestTrace",
    "Trace",
    "check_eviction_policy",
    "check_fpm_sink",
    "check_kv_event_sink",
    "check_planner",
    "check_rank_conformance",
    "check_router",
    "check_timing_model",
    "check_trace_format",
    "default_workload",
    "drive",
    "engine_maker",
    "kv_event_problems",
    "run_trace",
]
