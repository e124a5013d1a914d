"""Replay: workloads in, a simulated deployment in the middle, a serving report out.

:func:`simulate` runs a loaded configuration end to end; :class:`Replayer` is the
discrete-event driver underneath it, usable with hand-built engines and workloads.
"""

from servesim.replay.driver import Replayer, ReplayError
from servesim.replay.routers import KvRouter, RoundRobinRouter, Router
from servesim.replay.runner import SimResult, load_workload, simulate
from servesim.report.stats import RequestLog
from servesim.report.summary import build_report, format_table
from servesim.workload.model import Session, Turn, Workload, make_workload

__all__ = [
    "KvRouter",
    "ReplayError",
    "Replayer",
    "RequestLog",
    "RoundRobinRouter",
    "Router",
    "Session",
    "SimResult",
    "Turn",
    "Workload",
    "build_report",
    "format_table",
    "load_workload",
    "make_workload",
    "simulate",
]
