"""``GET /metrics``: Prometheus text with vLLM's metric names (vLLM's ``vllm/v1/metrics/loggers.py``).

:func:`make_observer` is the one place that picks the implementation: servesim-prometheus's
full vLLM metric set when it is installed (:mod:`servesim_serve.vllm_metrics`), else
:class:`PrometheusObserver`, the families below.

Gauges and counters carry vLLM's ``model_name`` and ``engine`` labels; ``engine`` is the rank's
slot ``worker * dp_size + dp_rank`` (vLLM numbers its data-parallel engines the same way).
Latency histograms observe simulated seconds, the latencies the simulated engine produced.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servesim_serve.observer import Observer

if TYPE_CHECKING:
    from servesim.config.loader import LoadedConfig
    from servesim.contract import ForwardPassMetrics, Metrics

    from servesim_serve.records import LiveRequest

# vLLM's buckets (seconds) for the request latency histograms
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


# (attribute, type, vLLM's name, vLLM's help text, buckets)
FAMILIES: tuple[tuple[str, Any, str, str, tuple[float, ...] | None], ...] = (
    ("running", Gauge, "vllm:num_requests_running", "Number of requests in model execution batches.", None),
    ("waiting", Gauge, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", None),
    ("kv_usage", Gauge, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
    ("preemptions", Counter, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
     None),
    ("prompt_tokens", Counter, "vllm:prompt_tokens", "Number of prefill tokens processed.", None),
    ("generation_tokens", Counter, "vllm:generation_tokens", "Number of generation tokens processed.", None),
    ("cache_queries", Counter, "vllm:prefix_cache_queries",
     "Prefix cache queries, in terms of number of queried tokens.", None),
    ("cache_hits", Counter, "vllm:prefix_cache_hits",
     "Prefix cache hits, in terms of number of cached tokens.", None),
    ("success", Counter, "vllm:request_success", "Count of successfully processed requests.", None),
    ("ttft", Histogram, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     TTFT_BUCKETS),
    ("itl", Histogram, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     ITL_BUCKETS),
    ("e2e", Histogram, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
     E2E_BUCKETS),
)


class PrometheusObserver(Observer):
    """Keeps vLLM-named metrics up to date from the driver's events (one attribute per
    :data:`FAMILIES` entry)."""

    running: Gauge
    waiting: Gauge
    kv_usage: Gauge
    preemptions: Counter
    prompt_tokens: Counter
    generation_tokens: Counter
    cache_queries: Counter
    cache_hits: Counter
    success: Counter
    ttft: Histogram
    itl: Histogram
    e2e: Histogram

    def __init__(self, model: str, dp_size: int) -> None:
        self.registry = CollectorRegistry()
        self.model = model
        self.dp_size = dp_size
        labels = ["model_name", "engine"]
        for attr, kind, name, doc, buckets in FAMILIES:
            extra = {"buckets": buckets} if buckets else {}
            names = [*labels, "finished_reason"] if attr == "success" else labels
            setattr(self, attr, kind(name, doc, names, registry=self.registry, **extra))
        self._engines: dict[tuple[int, int], _Engine] = {}

    def _engine(self, worker: int, dp_rank: int) -> _Engine:
        """The labelled children of one engine (looked up once: labels() is slow per token)."""
        key = (worker, dp_rank)
        found = self._engines.get(key)
        if found is None:
            found = self._engines[key] = _Engine(self, (self.model, str(worker * self.dp_size + dp_rank)))
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _state(self, worker: int, dp_rank: int, m: Metrics | None) -> None:
        if m is None:
            return
        e = self._engine(worker, dp_rank)
        e.running.set(m.running_requests)
        e.waiting.set(m.waiting_requests)
        e.kv_usage.set(m.cache_usage)

    def arrived(self, req: LiveRequest, metrics: Metrics | None) -> None:
        self._state(req.worker, req.dp_rank, metrics)

    def cancelled(self, req: LiveRequest, metrics: Metrics | None) -> None:
        self._state(req.worker, req.dp_rank, metrics)

    def pass_completed(self, worker: int, dp_rank: int, metrics: Metrics | None,
                       fpm: ForwardPassMetrics | None = None) -> None:
        self._state(worker, dp_rank, metrics)

    def preempted(self, worker: int, count: int, dp_rank: int = 0) -> None:
        self._engine(worker, dp_rank).preemptions.inc(count)

    def tokens(self, req: LiveRequest, count: int, now: float) -> None:
        e = self._engine(req.worker, req.dp_rank)
        e.generation_tokens.inc(count)
        times = req.times
        if len(times) == count:  # the first token(s)
            e.prompt_tokens.inc(req.prompt_len)
            e.cache_queries.inc(req.prompt_len)
            e.cache_hits.inc(req.cached_tokens())
            e.ttft.observe((times[0] - req.arrival) / 1000.0)
            return
        e.itl.observe((times[-count] - times[-count - 1]) / 1000.0)

    def finished(self, req: LiveRequest) -> None:
        if req.rejected:
            return
        e = self._engine(req.worker, req.dp_rank)
        self.success.labels(*e.labels, "abort" if req.cancelled else "length").inc()
        if req.cancelled:
            return
        if req.times:
            e.e2e.observe((req.times[-1] - req.arrival) / 1000.0)


class _Engine:
    """One engine's labelled children of every per-engine family."""

    running: Any
    waiting: Any
    kv_usage: Any
    preemptions: Any
    prompt_tokens: Any
    generation_tokens: Any
    cache_queries: Any
    cache_hits: Any
    ttft: Any
    itl: Any
    e2e: Any

    def __init__(self, m: PrometheusObserver, labels: tuple[str, str]) -> None:
        self.labels = labels
        for attr, *_rest in FAMILIES:
            if attr != "success":
                setattr(self, attr, getattr(m, attr).labels(*labels))


def make_observer(model: str, loaded: LoadedConfig) -> Observer:
    """The ``/metrics`` observer for this server (see the module docstring)."""
    engine = loaded.sim.engine
    try:
        # An optional distribution: looked up by name, so nothing requires it statically.
        module = importlib.import_module("servesim_prometheus.metrics")
    except ImportError:
        return PrometheusObserver(model, engine.dp_size)
    from servesim_serve.vllm_metrics import EngineMetricsObserver

    engines = [str(i) for i in range(loaded.sim.cluster.workers * engine.dp_size)]
    metrics = module.EngineMetrics(engine.backend, model_name=model, engines=engines,
                            max_model_len=engine.max_model_len,
                            kv_capacity_tokens=engine.num_gpu_blocks * engine.bs)
    return EngineMetricsObserver(metrics, module.FinishedRequest, engine.dp_size)
