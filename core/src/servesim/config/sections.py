"""The ``cluster:``, ``workload:``, ``report:`` and ``sinks:`` sections (issue 4's YAML shape).

Owned by the replay package; the loader in :mod:`servesim.config.loader` structures them with
the one converter that forbids unknown keys, and ``docs/configuration.md`` documents every key.
"""

from __future__ import annotations

import enum
from typing import Any

from attrs import field, frozen

from servesim.config.warm_cache import WarmCacheConfig
from servesim.config.workload_scope import SloClassConfig, SnapshotConfig, StopConfig, WarmupConfig


@frozen(kw_only=True)
class PoolConfig:
    """One pool of a heterogeneous cluster: ``workers`` aggregated workers named ``name``
    whose engine is ``engine:`` with ``engine`` (overrides) merged over it."""

    name: str
    workers: int = 1
    engine: dict[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class ClusterConfig:
    """Aggregated workers behind a router.

    * ``workers``: number of aggregated workers (engines), each with ``engine.dp_size`` ranks.
    * ``router``: a registered router (``round_robin`` default, ``kv``).
    * ``router_config``: options of the router's ``config_class`` (``kv``:
      ``overlap_score_weight``).
    * ``prefill_workers`` / ``decode_workers`` / ``prefill_engine`` / ``decode_engine``: the
      prefill/decode split (disaggregated replay, :mod:`servesim.replay.disagg`); ``workers``
      is then unused.
    * ``handoff_latency_ms``: the prefill→decode transfer time used when the engine gives
      none (no ``kv_transfer_bandwidth`` or KV size; aisimulate-engine.md §8.2 step 4).
    * ``pools``: a heterogeneous cluster (:mod:`servesim.replay.pools`): pools of aggregated
      workers, each with its own engine overrides (and so its own timing model), behind
      one router; ``workers`` is then unused.
    """

    workers: int = 1
    router: str = "round_robin"
    router_config: dict[str, Any] = field(factory=dict)
    prefill_workers: int = 0
    decode_workers: int = 0
    prefill_engine: dict[str, Any] = field(factory=dict)
    decode_engine: dict[str, Any] = field(factory=dict)
    handoff_latency_ms: float = 0.0
    pools: tuple[PoolConfig, ...] = ()


@frozen(kw_only=True)
class TraceConfig:
    """A trace file: ``path``, its ``format`` (a registered trace format) and
    ``trace_block_size`` (tokens per trace hash id; 512 for public Mooncake traces; separate
    from ``engine.block_size``); ``options``: the format's own options, passed to its reader
    (none by default)."""

    path: str
    format: str = "mooncake"
    trace_block_size: int = 512
    options: dict[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class SyntheticConfig:
    """A generated workload (lengths are distribution specs like ``uniform:1024:4096``).

    ``num_requests`` counts requests (turns); ``arrival`` is ``poisson``, ``constant`` or
    ``burst`` at ``rate`` sessions per second; ``prefix_groups`` groups share the first
    ``prefix_ratio`` of their first turn's prompt (whole ``block_size``-token blocks);
    ``turns_per_session`` turns per session, each later turn released
    ``inter_turn_delay_ms`` after the previous one finishes.
    """

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
    # LoRA adapter mix (servesim.workload.adapter_mix; docs/lora.md): 0 adapters is none.
    lora_adapters: int = 0
    lora_popularity: str = "uniform"
    lora_fraction: float = 1.0


@frozen(kw_only=True)
class WorkloadConfig:
    """``trace`` or ``synthetic`` (neither: the default synthetic scenario); ``concurrency``
    switches to closed-loop mode (N requests in flight, timestamps ignored);
    ``max_concurrency`` keeps timestamp mode but lets at most N sessions be active (a session
    due while N are waits for a slot: a benchmark client's ``--max-concurrency`` with a finite
    ``--request-rate``);
    ``arrival_speedup_ratio`` divides rebased first-turn timestamps; ``seed`` seeds synthetic
    generation. ``warmup``, ``stop``, ``classes``, ``admission``, ``lanes``, ``snapshot`` and
    ``warm_cache``: docs/workloads.md (:mod:`servesim.config.workload_scope`,
    :mod:`servesim.config.warm_cache`); all off unless set."""

    trace: TraceConfig | None = None
    synthetic: SyntheticConfig | None = None
    concurrency: int | None = None
    max_concurrency: int | None = None
    arrival_speedup_ratio: float = 1.0
    seed: int = 0
    warmup: WarmupConfig | None = None
    stop: StopConfig | None = None
    classes: tuple[SloClassConfig, ...] = ()
    admission: dict[str, Any] | None = None
    lanes: int | None = None
    snapshot: SnapshotConfig | None = None
    warm_cache: WarmCacheConfig | None = None


@frozen(kw_only=True)
class ReportConfig:
    """SLAs for goodput (ms; unset ones are not checked), the percentiles reported for every
    latency metric, and optional output paths (``--output-json`` / ``--per-request`` win)."""

    sla_ttft_ms: float | None = None
    sla_tpot_ms: float | None = None
    sla_e2e_ms: float | None = None
    percentiles: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
    output_json: str | None = None
    per_request: str | None = None
    plot: str | None = None


class SinkWriterMode(enum.Enum):
    """Where the built-in JSONL sinks of a several-worker replay format and write their lines
    (``sinks.writer``; servesim.fast.sink_offload)."""

    AUTO = "auto"
    INLINE = "inline"
    PROCESS = "process"


@frozen(kw_only=True)
class SinksConfig:
    """Lists of sinks, each ``{type: <registered sink>, <its options>...}``, and where the
    JSONL sinks' lines are made (``writer``)."""

    kv_events: tuple[dict[str, Any], ...] = ()
    fpm: tuple[dict[str, Any], ...] = ()
    writer: SinkWriterMode = SinkWriterMode.AUTO
