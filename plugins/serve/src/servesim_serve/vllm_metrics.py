"""``/metrics`` through servesim-prometheus's :class:`EngineMetrics`: vLLM's whole metric set
(the families, labels and buckets that package pins against vLLM's own logger).

Gauges follow each pass's forward-pass metrics, so the engines emit them whenever this observer
is in use. Latencies are simulated seconds (:func:`servesim_serve.metrics.make_observer`).
A pass's tokens are recorded together when the pass's completion is reported (one update of
each family per pass and rank, not one per request: the label lookups were most of the cost).
Finished requests are recorded together per engine when the driver flushes, after the pass's
first chunks have been written (a finished request's dozen histograms cost some 30 us).

At each scrape the scheduler gauges (requests running and waiting, KV-cache usage, KV tokens in
use) are set from every rank's state at that moment (``Rank.metrics()``), as vLLM's logger
reports its scheduler's latest state: a pass's forward-pass metrics describe the batch it ran,
and once the last pass has ended no pass comes to report that its requests have gone, so the
gauges would stay at that batch while the server idles. A rank's requests running are those
submitted to it and not yet ended, less those waiting: an engine settles a pass's outcome when
the pass starts, so a request whose last token is being computed has already left its
scheduler's running list, but it runs until the pass ends. Then ``running + waiting``
over the engines is exactly the requests submitted and not yet ended. In a prefill/decode split
a request moves: it is counted on its prefill rank from its arrival (a reserve-first backend:
on its decode rank until its prefill is submitted), in KV transfer too (the prefill rank's
blocks hold its KV), and on its decode rank from its destination's activation, where the
decode scheduler takes it; each rank's running requests are again those on it less its
scheduler's waiting ones, so the same sum holds. Once the simulation has stopped, its aborted
requests count finished (reason ``abort``) and every scheduler gauge reads 0 (:meth:`stopped`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest

from servesim_serve.observer import Observer

if TYPE_CHECKING:
    from servesim.contract import ForwardPassMetrics, Metrics

    from servesim_serve.records import LiveRequest


class EngineMetricsObserver(Observer):
    """Feeds one ``servesim_prometheus.metrics.EngineMetrics`` from the driver's events."""

    wants_fpm = True

    def __init__(self, metrics: Any, finished_request: Any, dp_size: int) -> None:
        self.metrics = metrics
        self.finished_request = finished_request  # servesim_prometheus.metrics.FinishedRequest
        self.dp_size = dp_size
        # The pass being completed: first tokens (TTFT s, prompt tokens, cached tokens) and
        # the inter-token gaps (s) of the later tokens, in the order the requests came.
        self._first: list[tuple[float, int, int]] = []
        self._gaps: list[float] = []
        self._finished: dict[str, list[Any]] = {}  # engine -> FinishedRequest, until flush()
        self._engines: Sequence[Any] = ()
        self._block_size = 0
        self._in_flight: dict[str, int] = {}  # engine -> requests submitted there, not ended
        self._counted: dict[int, str] = {}  # request id -> its engine in _in_flight
        self._home: Callable[[int], tuple[int, int]] | None = None  # a split's (Observer.watch)
        self._moving: dict[int, None] = {}  # a split's requests not ended, by id
        # With LoRA on (servesim_serve.metrics.make_observer): adapter names by id, and the
        # LoRA requests not ended, by id, for vllm:lora_requests_info.
        self.lora_names: dict[int, str] | None = None
        self._lora_live: dict[int, LiveRequest] = {}
        self._stopped = False  # the simulation stopped: the scheduler gauges read zero
        self._cluster: Any = None  # an elastic cluster's driver (watch_cluster)
        self._workers: Any = None  # its servesim:workers gauge

    def _engine(self, worker: int, dp_rank: int) -> str:
        return str(worker * self.dp_size + dp_rank)

    def watch(self, engines: Sequence[Any], block_size: int,
              home: Callable[[int], tuple[int, int]] | None = None) -> None:
        self._engines = engines
        self._block_size = block_size
        self._home = home

    def watch_cluster(self, cluster: Any) -> None:
        """An elastic cluster: ``servesim:workers`` (a gauge labelled ``model_name``, ``pool``
        and ``state``: starting, warmup, ready, draining, restarting, stopped) counts its
        workers at each scrape; a worker whose engine is discarded reads 0 in the scheduler
        gauges."""
        from prometheus_client import Gauge

        self._cluster = cluster
        self._workers = Gauge("servesim:workers",
                              "Workers of the served cluster by pool and lifecycle state.",
                              ["model_name", "pool", "state"], registry=self.metrics.registry)

    def render(self) -> bytes:
        self.flush()
        self._scheduler_state()
        return generate_latest(self.metrics.registry)

    def _scheduler_state(self) -> None:
        """The scheduler gauges from each rank's current state (the module docstring)."""
        if not self._engines:
            return
        set_gauge = self.metrics.set_gauge
        dead: Any = ()
        if self._cluster is not None:
            model = self.metrics.model_name
            for pool, state, n in self._cluster.worker_counts():
                self._workers.labels(model, pool, state).set(n)
            dead = self._cluster.dead_workers()
        if self._stopped:
            self._zero_scheduler_state()
            return
        in_flights = self._in_flight if self._home is None else self._split_in_flight()
        for w, engine in enumerate(self._engines):
            if w in dead:  # its engine is discarded: nothing runs there
                self._zero_worker(w, len(engine.ranks))
                continue
            for dp, rank in enumerate(engine.ranks):
                metrics = getattr(rank, "metrics", None)
                m = metrics() if metrics is not None else None
                if m is None:
                    continue  # the rank keeps no metrics: its last pass's stay
                label = self._engine(w, dp)
                in_flight = in_flights.get(label)
                running = m.running_requests if in_flight is None else max(in_flight - m.waiting_requests, 0)
                for key, value in (("running", running), ("waiting", m.waiting_requests),
                                   ("used_tokens", m.active_blocks * self._block_size),
                                   ("kv_usage", m.cache_usage)):
                    set_gauge(key, label, value)
                set_gauge("waiting_by_reason", label, m.waiting_requests, "capacity")
        if self.lora_names is not None:
            self._lora_state()

    def stopped(self) -> None:
        self._stopped = True

    def _zero_scheduler_state(self) -> None:
        """The simulation has stopped and its requests were aborted (counted finished with
        reason ``abort``): nothing runs, waits or holds KV any more, whatever the engines,
        no longer stepped, still hold."""
        for w, engine in enumerate(self._engines):
            self._zero_worker(w, len(engine.ranks))
        if self.lora_names is not None:
            self._lora_state()

    def _zero_worker(self, w: int, ranks: int) -> None:
        set_gauge = self.metrics.set_gauge
        for dp in range(ranks):
            label = self._engine(w, dp)
            for key in ("running", "waiting", "used_tokens", "kv_usage"):
                set_gauge(key, label, 0)
            set_gauge("waiting_by_reason", label, 0, "capacity")

    def _lora_state(self) -> None:
        """``vllm:lora_requests_info`` now: the adapters with requests waiting (not yet
        admitted) and running (admitted, not ended), as vLLM's logger labels the gauge
        (vllm/v1/metrics/loggers.py, v0.32), in ascending adapter id as the replay sink's
        (servesim_prometheus.lora_info); its value is the wall-clock time of the scrape."""
        names = self.lora_names or {}
        waiting = sorted({r.lora for r in self._lora_live.values() if r.admitted < 0.0})
        running = sorted({r.lora for r in self._lora_live.values() if r.admitted >= 0.0})
        self.metrics.record_lora([names.get(a, str(a)) for a in waiting],
                                 [names.get(a, str(a)) for a in running], time.time())

    def _split_in_flight(self) -> dict[str, int]:
        """A split's requests not ended, per rank they are on now (every rank present)."""
        counts = {self._engine(w, dp): 0 for w, engine in enumerate(self._engines)
                  for dp in range(len(engine.ranks))}
        home = self._home
        assert home is not None
        for rid in self._moving:
            label = self._engine(*home(rid))
            if label in counts:  # else not yet routed: its arrival was cut short by a failure
                counts[label] += 1
        return counts

    def flush(self) -> None:
        if self._finished:
            finished, self._finished = self._finished, {}
            for engine, requests in finished.items():
                self.metrics.record_finished(engine, requests)

    def pass_completed(self, worker: int, dp_rank: int, metrics: Metrics | None,
                       fpm: ForwardPassMetrics | None = None) -> None:
        engine = self._engine(worker, dp_rank)
        if self._first:
            first, self._first = self._first, []
            m = self.metrics
            m.record_first_tokens(engine, [f[0] for f in first], sum(f[1] for f in first),
                                  sum(f[2] for f in first))
        if self._gaps:
            gaps, self._gaps = self._gaps, []
            self.metrics.record_tokens(engine, gaps)
        if fpm is not None:
            self.metrics.record_pass(engine, fpm)

    def preempted(self, worker: int, count: int, dp_rank: int = 0) -> None:
        self.metrics.record_preemptions(self._engine(worker, dp_rank), count)

    def tokens(self, req: LiveRequest, count: int, now: float) -> None:
        times = req.times
        first = len(times) == count
        if first:
            self._first.append(((times[0] - req.arrival) / 1000.0, req.prompt_len, req.cached_tokens()))
        gaps = self._gaps
        for i in range(max(len(times) - count + (1 if first else 0), 1), len(times)):
            gaps.append((times[i] - times[i - 1]) / 1000.0)

    def arrived(self, req: LiveRequest, metrics: Metrics | None) -> None:
        if req.worker >= 0:  # an aggregated worker's request
            label = self._engine(req.worker, req.dp_rank)
            self._in_flight[label] = self._in_flight.get(label, 0) + 1
            self._counted[req.rid] = label
        elif self._home is not None:  # a split's: it moves (counted at each render)
            self._moving[req.rid] = None
        if req.lora and self.lora_names is not None:
            self._lora_live[req.rid] = req

    def finished(self, req: LiveRequest) -> None:
        label = self._counted.pop(req.rid, None)
        if label is not None:
            self._in_flight[label] -= 1
        self._moving.pop(req.rid, None)
        self._lora_live.pop(req.rid, None)
        if req.rejected or req.worker < 0:  # refused, or never reached a rank
            return
        times = req.times
        end = times[-1] if times else req.arrival
        admitted = req.admitted if req.admitted >= 0 else req.arrival
        first = times[0] if times else end
        self._finished.setdefault(self._engine(req.worker, req.dp_rank), []).append(self.finished_request(
            e2e_s=(end - req.arrival) / 1000.0, queue_s=(admitted - req.arrival) / 1000.0,
            prefill_s=max(first - admitted, 0.0) / 1000.0, decode_s=(end - first) / 1000.0,
            prompt_tokens=req.prompt_len, generation_tokens=len(times),
            cached_tokens=req.cached_tokens(), max_tokens=req.max_tokens,
            finished_reason="abort" if req.cancelled or req.aborted else "length"))
