"""vLLM's (or SGLang's) Prometheus metrics for a set of simulated engines, in one registry.

The reusable core: a replay fills it from its passes and request log
(:mod:`servesim_prometheus.replay`), and a live server can update it as things happen and
expose it at ``/metrics``::

    from prometheus_client import make_asgi_app
    from servesim_prometheus.metrics import EngineMetrics, FinishedRequest

    m = EngineMetrics("vllm", model_name="my-model", engines=["0", "1"], max_model_len=8192,
                      kv_capacity_tokens=16384 * 16)
    m.record_pass("0", fpm)                        # after every forward pass of engine "0"
    m.record_first_token("0", ttft_s=0.12, prompt_tokens=900, cached_tokens=512)
    m.record_tokens("0", [0.021, 0.020])           # inter-token gaps of newly emitted tokens
    m.record_finished("0", [FinishedRequest(...)]) # finished requests
    m.record_preemptions("0", 1)
    app = make_asgi_app(m.registry)                # serve it at /metrics

``engines`` are the values of vLLM's ``engine`` label (SGLang: ``dp_rank``); servesim uses
``str(worker * dp_size + dp_rank)``. Names, types, labels and buckets are in
:mod:`servesim_prometheus.families`. Families servesim has nothing to put in (multi-modal
cache, external KV transfer, modelled FLOPs, admission rejections) stay at zero, as an idle
vLLM server shows them. Everything here is a plain update; nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from attrs import frozen
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from servesim.contract import ForwardPassMetrics

from servesim_prometheus.families import FAMILIES, SGLANG_SCHEDULER_LABELS, Family, one_two_five


@frozen
class FinishedRequest:
    """One finished request, in seconds and tokens (vLLM's per-request stats)."""

    e2e_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    prompt_tokens: int
    generation_tokens: int
    cached_tokens: int = 0
    max_tokens: int | None = None
    preemptions: int = 0
    finished_reason: str = "length"

    @property
    def inference_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tpot_s(self) -> float | None:
        return self.decode_s / (self.generation_tokens - 1) if self.generation_tokens > 1 else None


class EngineMetrics:
    """Every metric family of ``backend`` (``vllm``, ``sglang``; other backends use vLLM's
    names), with a child per engine, in :attr:`registry`."""

    def __init__(self, backend: str = "vllm", *, model_name: str = "servesim",
                 engines: Sequence[str] = ("0",), max_model_len: int | None = None,
                 kv_capacity_tokens: int | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.backend = backend if backend in FAMILIES else "vllm"
        self.model_name = model_name
        self.engines = list(engines)
        self.kv_capacity_tokens = kv_capacity_tokens
        self.registry = registry if registry is not None else CollectorRegistry()
        self.max_lora: str | None = None  # set by enable_lora
        self.lora_info: Any = None
        token_buckets = one_two_five(max_model_len or 2048)
        self._by_key: dict[str, list[tuple[Family, Any]]] = {}
        for fam in FAMILIES[self.backend]:
            metric = self._build(fam, token_buckets)
            self._by_key.setdefault(fam.key, []).append((fam, metric))
            self._precreate(fam, metric)
        self._set_all("sleep_state", 1.0, extra="awake")
        if self.backend == "sglang" and kv_capacity_tokens:
            self._set_all("max_tokens", float(kv_capacity_tokens))

    def enable_lora(self, max_lora: int) -> None:
        """Add vLLM's ``vllm:lora_requests_info`` (vllm/v1/metrics/loggers.py, v0.32): a gauge
        whose labels are ``max_lora`` and the comma-joined names of the adapters with waiting
        and with running requests, set to the (simulated) Unix time of each update."""
        self.max_lora = str(max_lora)
        self.lora_info = Gauge("vllm:lora_requests_info", "Running stats on lora requests.",
                               ["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
                               registry=self.registry)

    def record_lora(self, waiting: Sequence[str], running: Sequence[str], at_s: float) -> None:
        """One update of ``vllm:lora_requests_info`` (after :meth:`enable_lora`)."""
        self.lora_info.labels(self.max_lora, ",".join(waiting), ",".join(running)).set(at_s)

    # -- construction ---------------------------------------------------------------

    def _labelnames(self, fam: Family) -> list[str]:
        if self.backend == "sglang":
            names = list(SGLANG_SCHEDULER_LABELS) if fam.engine_label else ["model_name"]
        else:
            names = ["model_name", "engine"] if fam.engine_label else ["model_name"]
        return names + ([fam.extra[0]] if fam.extra else [])

    def _build(self, fam: Family, token_buckets: tuple[int, ...]) -> Any:
        labels = self._labelnames(fam)
        if fam.kind == "gauge":
            return Gauge(fam.name, fam.help, labels, registry=self.registry)
        if fam.kind == "counter":
            return Counter(fam.name, fam.help, labels, registry=self.registry)
        buckets = token_buckets if fam.buckets == "tokens" else fam.buckets
        return Histogram(fam.name, fam.help, labels, registry=self.registry, buckets=buckets)

    def _label_values(self, fam: Family, engine: str | None) -> list[str]:
        if not fam.engine_label:
            return [self.model_name]
        if self.backend == "sglang":
            return [self.model_name, "unified", "0", "0", str(engine)]
        return [self.model_name, str(engine)]

    def _precreate(self, fam: Family, metric: Any) -> None:
        for engine in self.engines if fam.engine_label else [None]:
            base = self._label_values(fam, engine)
            for extra in fam.extra[1] if fam.extra else [None]:
                metric.labels(*base, *([extra] if extra is not None else []))

    def set_gauge(self, key: str, engine: str, value: float, extra: str | None = None) -> None:
        """Set the gauge ``key`` of ``engine`` (and its ``extra`` label value, for a family
        that has one) in every metric family that carries it."""
        for child in self._children(key, engine, extra):
            child.set(value)

    def _children(self, key: str, engine: str, extra: str | None = None) -> Iterable[Any]:
        for fam, metric in self._by_key.get(key, ()):
            values = self._label_values(fam, engine)
            if fam.extra:
                if extra is None:
                    continue
                values.append(extra)
            yield metric.labels(*values)

    def _set_all(self, key: str, value: float, extra: str | None = None) -> None:
        for engine in self.engines:
            for child in self._children(key, engine, extra):
                child.set(value)

    def _inc(self, key: str, engine: str, amount: float, extra: str | None = None) -> None:
        if amount:
            for child in self._children(key, engine, extra):
                child.inc(amount)

    def _observe(self, key: str, engine: str, values: Sequence[float]) -> None:
        for child in self._children(key, engine):
            observe_many(child, values)

    # -- updates --------------------------------------------------------------------

    def record_pass(self, engine: str, fpm: ForwardPassMetrics) -> None:
        """One forward pass: the scheduler gauges as it leaves them, and its token count."""
        self.record_passes(engine, [fpm])

    def record_passes(self, engine: str, fpms: Sequence[ForwardPassMetrics]) -> None:
        """Several passes of one engine, in order: gauges from the last, every token count.

        KV in use is what the last pass's requests hold (prefill: read plus computed
        tokens; decode: context lengths), over ``kv_capacity_tokens``."""
        if not fpms:
            return
        fpm = fpms[-1]
        running = fpm.num_prefill_requests + fpm.num_decode_requests
        waiting = fpm.num_queued_prefill + fpm.num_queued_decode
        used = fpm.sum_prefill_kv_tokens + fpm.sum_prefill_tokens + fpm.sum_decode_kv_tokens
        for key, value in (("running", running), ("waiting", waiting), ("used_tokens", used)):
            for child in self._children(key, engine):
                child.set(value)
        for child in self._children("waiting_by_reason", engine, "capacity"):
            child.set(waiting)
        if self.kv_capacity_tokens:
            for child in self._children("kv_usage", engine):
                child.set(min(1.0, used / self.kv_capacity_tokens))
        read = fpm.sum_prefill_kv_tokens
        if fpm.num_prefill_requests and read + fpm.sum_prefill_tokens:
            for child in self._children("hit_rate", engine):
                child.set(read / (read + fpm.sum_prefill_tokens))
        self._observe("iteration_tokens", engine,
                      [f.sum_prefill_tokens + f.num_decode_requests for f in fpms])

    def record_first_token(self, engine: str, ttft_s: float, prompt_tokens: int, cached_tokens: int) -> None:
        """A request's first token: its TTFT, and its prompt counted as processed."""
        self.record_first_tokens(engine, [ttft_s], prompt_tokens, cached_tokens)

    def record_first_tokens(self, engine: str, ttfts_s: Sequence[float], prompt_tokens: int,
                            cached_tokens: int) -> None:
        """Several first tokens: their TTFTs and the sums of their prompt and cached tokens."""
        if not ttfts_s:
            return
        self._observe("ttft", engine, ttfts_s)
        self._inc("prompt_tokens", engine, prompt_tokens)
        self._inc("generation_tokens", engine, len(ttfts_s))
        self._inc("prefix_queries", engine, prompt_tokens)
        self._inc("prefix_hits", engine, cached_tokens)
        self._inc("prompt_by_source", engine, prompt_tokens - cached_tokens, "local_compute")
        self._inc("prompt_by_source", engine, cached_tokens, "local_cache_hit")
        self._inc("prompt_cached", engine, cached_tokens)
        self._inc("cached_by_source", engine, cached_tokens, "device")

    def record_tokens(self, engine: str, gaps_s: Sequence[float]) -> None:
        """Tokens after the first, one inter-token gap each."""
        self._inc("generation_tokens", engine, len(gaps_s))
        self._observe("itl", engine, gaps_s)

    def record_preemptions(self, engine: str, n: int) -> None:
        self._inc("preemptions", engine, n)

    def record_finished(self, engine: str, requests: Sequence[FinishedRequest]) -> None:
        """Finished requests: latency and size histograms and success counts."""
        if not requests:
            return
        obs = self._observe
        obs("e2e", engine, [r.e2e_s for r in requests])
        obs("queue", engine, [r.queue_s for r in requests])
        obs("prefill", engine, [r.prefill_s for r in requests])
        obs("decode", engine, [r.decode_s for r in requests])
        obs("inference", engine, [r.inference_s for r in requests])
        obs("tpot", engine, [r.tpot_s for r in requests if r.tpot_s is not None])
        obs("req_prompt_tokens", engine, [r.prompt_tokens for r in requests])
        obs("req_generation_tokens", engine, [r.generation_tokens for r in requests])
        obs("req_max_tokens", engine, [r.generation_tokens if r.max_tokens is None else r.max_tokens
                                       for r in requests])
        obs("req_n", engine, [1] * len(requests))
        obs("req_preemptions", engine, [r.preemptions for r in requests])
        obs("req_computed", engine, [r.prompt_tokens - r.cached_tokens for r in requests])
        reasons: dict[str, int] = {}
        for r in requests:
            reasons[r.finished_reason] = reasons.get(r.finished_reason, 0) + 1
        for reason, n in sorted(reasons.items()):
            self._inc("success", engine, n, reason)
        self._inc("finished", engine, len(requests))


def observe_many(child: Any, values: Sequence[float]) -> None:
    """``child.observe(v)`` for every value, in one update per bucket when the histogram's
    layout is the one prometheus-client has kept since 0.4 (as SGLang's collector does)."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    if bounds is None or buckets is None or not hasattr(child, "_sum"):
        for v in values:
            child.observe(v)
        return
    if not len(values):
        return
    if len(values) == 1:
        child.observe(values[0])
        return
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    # bounds[i] is the first bound >= v: Histogram.observe's bucket for v
    idx = np.searchsorted(np.asarray(bounds, dtype=np.float64), arr, side="left")
    counts = np.bincount(idx, minlength=len(bounds))
    child._sum.inc(float(math.fsum(arr.tolist())))
    for i, c in enumerate(counts.tolist()):
        if c:
            buckets[i].inc(c)


__all__ = ["EngineMetrics", "FinishedRequest", "observe_many"]
