"""The whole configuration of one simulation run: five sections of one YAML file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from attrs import field, frozen

from servesim.config.engine import EngineConfig
from servesim.config.sections import ClusterConfig, ReportConfig, SinksConfig, WorkloadConfig

if TYPE_CHECKING:  # imported when a config sets one of them (servesim.config.loader)
    from servesim.config.elastic import FaultsConfig, LifecycleConfig


@frozen(kw_only=True)
class SimConfig:
    """``engine:`` (engine arguments + ``backend:``), ``cluster:``, ``workload:``, ``report:``,
    ``sinks:``. Every section is optional; an empty file is the built-in default scenario."""

    engine: EngineConfig = field(factory=EngineConfig)
    cluster: ClusterConfig = field(factory=ClusterConfig)
    workload: WorkloadConfig = field(factory=WorkloadConfig)
    report: ReportConfig = field(factory=ReportConfig)
    sinks: SinksConfig = field(factory=SinksConfig)
    # Optional sections of an elastic, failing cluster (servesim.config.elastic); None: off.
    lifecycle: LifecycleConfig | None = None
    planner: dict[str, Any] | None = None
    faults: FaultsConfig | None = None

    @property
    def is_elastic(self) -> bool:
        """Whether the run needs the elastic replay (any of its sections is set)."""
        return self.lifecycle is not None or self.planner is not None or self.faults is not None


class RunConfig(Protocol):
    """What the observer hooks see of a run's configuration (``servesim_run_started``,
    ``servesim_report_extra``); :class:`servesim.config.loader.LoadedConfig` is one."""

    @property
    def sim(self) -> SimConfig:
        """The typed sections."""

    @property
    def source(self) -> str:
        """The config file(s) it was read from, as error messages name them."""

    def resolved(self) -> dict[str, Any]:
        """The full resolved configuration as plain data."""


SECTIONS: tuple[str, ...] = ("engine", "cluster", "workload", "report", "sinks")
#: The optional sections of an elastic, failing cluster; their classes are
#: servesim.config.elastic.ELASTIC_SECTIONS, loaded only for a config that sets one.
ELASTIC: tuple[str, ...] = ("lifecycle", "faults")
