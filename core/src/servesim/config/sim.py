"""The whole configuration of one simulation run: five sections of one YAML file."""

from __future__ import annotations

from attrs import field, frozen

from servesim.config.engine import EngineConfig
from servesim.config.sections import ClusterConfig, ReportConfig, SinksConfig, WorkloadConfig


@frozen(kw_only=True)
class SimConfig:
    """``engine:`` (engine arguments + ``backend:``), ``cluster:``, ``workload:``, ``report:``,
    ``sinks:``. Every section is optional; an empty file is the built-in default scenario."""

    engine: EngineConfig = field(factory=EngineConfig)
    cluster: ClusterConfig = field(factory=ClusterConfig)
    workload: WorkloadConfig = field(factory=WorkloadConfig)
    report: ReportConfig = field(factory=ReportConfig)
    sinks: SinksConfig = field(factory=SinksConfig)


SECTIONS: tuple[str, ...] = ("engine", "cluster", "workload", "report", "sinks")
