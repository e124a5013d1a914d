"""The ``cluster:``, ``workload:``, ``report:`` and ``sinks:`` sections (issue 4's YAML shape).

Owned by the replay package; the loader in :mod:`servesim.config.loader` structures them with
the one converter that forbids unknown keys.
"""

from __future__ import annotations

from typing import Any

from attrs import field, frozen


@frozen(kw_only=True)
class ClusterConfig:
    """Aggregated workers behind a router; later also the prefill/decode split."""

    workers: int = 1
    router: str = "round_robin"
    router_config: dict[str, Any] = field(factory=dict)
    prefill_workers: int = 0
    decode_workers: int = 0
    prefill_engine: dict[str, Any] = field(factory=dict)
    decode_engine: dict[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class TraceConfig:
    path: str
    format: str = "mooncake"
    trace_block_size: int = 512


@frozen(kw_only=True)
class SyntheticConfig:
    """A generated workload (lengths are distribution specs like ``uniform:1024:4096``)."""

    num_requests: int = 200
    input_length: str = "uniform:512:2048"
    output_length: str = "uniform:64:256"
    arrival: str = "poisson"
    rate: float = 4.0
    prefix_groups: int = 4
    prefix_ratio: float = 0.5
    turns_per_session: int = 1
    inter_turn_delay_ms: float = 0.0
    block_size: int = 64


@frozen(kw_only=True)
class WorkloadConfig:
    trace: TraceConfig | None = None
    synthetic: SyntheticConfig | None = None
    concurrency: int | None = None
    arrival_speedup_ratio: float = 1.0
    seed: int = 0


@frozen(kw_only=True)
class ReportConfig:
    sla_ttft_ms: float | None = None
    sla_tpot_ms: float | None = None
    sla_e2e_ms: float | None = None
    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
    output_json: str | None = None
    per_request: str | None = None


@frozen(kw_only=True)
class SinkSpec:
    """``type`` names a registered sink; other keys configure it."""

    type: str
    options: dict[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class SinksConfig:
    kv_events: tuple[dict[str, Any], ...] = ()
    fpm: tuple[dict[str, Any], ...] = ()
