"""Heterogeneous clusters: ``cluster.pools`` of aggregated workers behind one router.

Each pool's engine is ``engine:`` with the pool's ``engine`` overrides merged over it, so a
pool may run another backend, another pool size or another timing model (e.g. 2 workers on
H200 with TP 2 and 4 on H100 with TP 1). Workers are numbered pool by pool in config order;
the router sees them all. Every pool shares ``dp_size`` and ``block_size`` (checked when the
config is loaded), so one slot layout and one hash granularity serve the router.

The report gains ``pools``: per pool its workers, GPUs (``tp x pp x dp_size`` per worker, as
the timing model knows its deployment, 1 x ``dp_size`` otherwise), completed requests,
throughput and throughput per GPU, latency (TTFT, TPOT, E2E) and utilisation (the share of
the run its workers spent in passes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from attrs import frozen

from servesim.engine import Engine
from servesim.factory import EngineFactory
from servesim.report.stats import RequestLog, distribution

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig


@frozen
class PoolSpan:
    """Pool ``name`` holds workers ``first .. first + workers - 1``."""

    name: str
    first: int
    workers: int
    gpus_per_worker: int


def build_pool_engines(
    loaded: LoadedConfig, make_factory: Any
) -> tuple[list[Engine], list[PoolSpan]]:
    """The engines of every pool (``make_factory(overrides, path)`` builds one pool's
    factory) and where each pool's workers are."""
    engines: list[Engine] = []
    spans: list[PoolSpan] = []
    for i, pool in enumerate(loaded.sim.cluster.pools):
        factory: EngineFactory = make_factory(pool.engine, f"cluster.pools[{i}].engine")
        gpus = factory.services.timing.gpus_per_rank * factory.config.dp_size
        spans.append(PoolSpan(pool.name, len(engines), pool.workers, gpus))
        engines += [factory.build(len(engines) + w) for w in range(pool.workers)]
    return engines, spans


def _latency(log: RequestLog, mask: np.ndarray, pcts: Sequence[float]) -> dict[str, float]:
    arrival = np.asarray(log.arrival)[mask]
    first = np.asarray(log.first)[mask]
    last = np.asarray(log.last)[mask]
    ntok = np.asarray(log.ntok, dtype=np.int64)[mask]
    has, multi = ntok >= 1, ntok >= 2
    out: dict[str, float] = {}
    for name, vals in (("ttft", (first - arrival)[has]), ("e2el", (last - arrival)[has]),
                       ("tpot", (last - first)[multi] / (ntok[multi] - 1))):
        d = distribution(name, vals, pcts)
        out.update({k: v for k, v in d.items() if not k.startswith(("std_", "max_"))})
    return out


def pool_report(
    log: RequestLog, spans: Sequence[PoolSpan], busy_ms: Sequence[float], pcts: Sequence[float]
) -> list[dict[str, Any]]:
    """The report's ``pools`` section (see the module docs)."""
    done_mask = log.completed_mask()
    done = np.asarray(log.done)
    duration_ms = float(done[done_mask].max()) if done_mask.any() else 0.0
    dur_s = max(duration_ms / 1000.0, 1e-9)
    worker = np.asarray(log.worker)
    ntok = np.asarray(log.ntok, dtype=np.int64)
    out = []
    for span in spans:
        mask = done_mask & (worker >= span.first) & (worker < span.first + span.workers)
        gpus = span.gpus_per_worker * span.workers
        tokens = int(ntok[mask].sum())
        busy = sum(busy_ms[span.first : span.first + span.workers])
        out.append({
            "name": span.name,
            "workers": span.workers,
            "gpus": gpus,
            "completed": int(mask.sum()),
            "request_throughput": int(mask.sum()) / dur_s,
            "output_throughput": tokens / dur_s,
            "output_throughput_per_gpu": tokens / dur_s / gpus,
            "utilization": busy / (span.workers * duration_ms) if duration_ms > 0 else 0.0,
            **_latency(log, mask, pcts),
        })
    return out
