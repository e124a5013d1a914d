"""Test helpers for servesim and for third-party backends.

* :func:`drive` — a minimal single-engine driver returning per-request traces;
* :func:`check_rank_conformance` / :class:`RankConformance` — the contract's invariants,
  checked against any rank class (see :mod:`servesim.testing.conformance`);
* :func:`check_eviction_policy` — the eviction contract's invariants, checked against any
  eviction policy (see :mod:`servesim.testing.eviction_kit`);
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
from servesim.testing.trace import Trace, kv_event_problems, run_trace

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
    "check_rank_conformance",
    "default_workload",
    "drive",
    "engine_maker",
    "kv_event_problems",
    "run_trace",
]
