"""Test helpers for servesim and for third-party backends.

* :func:`drive` — a minimal single-engine driver returning per-request traces;
* :func:`check_rank_conformance` / :class:`RankConformance` — the contract's invariants,
  checked against any rank class (see :mod:`servesim.testing.conformance`);
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
from servesim.testing.trace import Trace, kv_event_problems, run_trace

__all__ = [
    "CHECKS",
    "ConformanceOptions",
    "ConformanceReport",
    "DriveResult",
    "RankConformance",
    "RequestTrace",
    "Trace",
    "check_rank_conformance",
    "default_workload",
    "drive",
    "engine_maker",
    "kv_event_problems",
    "run_trace",
]
