"""A replay's metrics as an OpenMetrics file with simulated timestamps.

The replay is scraped every ``interval_s`` of simulated time: scrape ``k`` at ``epoch_s + k *
interval_s`` shows the :class:`~servesim_prometheus.metrics.EngineMetrics` after everything
that happened by then, as a Prometheus scraping the simulated server would have seen it.

What goes in, and when:

* each pass (its FPM) at its end: scheduler gauges (from the last pass before the scrape) and
  ``iteration_tokens_total``;
* each request's first token: TTFT, prompt, prefix-cache and first generation token counters;
* each later token: ``generation_tokens`` and its inter-token gap;
* each finished request: its latency and size histograms and ``request_success``
  (``finished_reason="length"``: a trace replay ends every request at its output length);
* preemptions (the log counts them, not when): all at the last scrape, on the first engine.

Queue time runs from arrival to first admission, prefill time from then to the first token
(vLLM's ``scheduled`` to ``first token``). The file follows the OpenMetrics text format: each
family once, its series' points in timestamp order, ``_created`` set to the epoch (the
simulated server's start), and ``# EOF``. ``promtool tsdb create-blocks-from openmetrics``
reads it into Prometheus blocks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import IO, Any

from prometheus_client.utils import floatToGoString
from servesim.contract import ForwardPassMetrics

from servesim_prometheus.lora_info import LoraSweep
from servesim_prometheus.metrics import EngineMetrics, FinishedRequest

_Bins = dict[int, dict[str, list[Any]]]


def _bin(at_ms: float, interval_ms: float) -> int:
    """The first scrape (1, 2, ...) that sees something that happened at ``at_ms``."""
    return max(1, math.ceil(at_ms / interval_ms))


class ReplayScrapes:
    """Collects passes during the replay; :meth:`write` scrapes the whole run afterwards."""

    def __init__(self, metrics: EngineMetrics, *, epoch_s: float, interval_s: float,
                 dp_size: int, lora_names: dict[int, str] | None = None) -> None:
        self.metrics = metrics
        self.lora_names = lora_names or {}  # served adapter names by id (LoraSweep)
        self.epoch_s = epoch_s
        self.interval_ms = interval_s * 1000.0
        self.dp_size = dp_size
        self.passes: _Bins = defaultdict(lambda: defaultdict(list))
        self.end_ms = 0.0

    def engine(self, worker: int, dp_rank: int) -> str:
        return str(worker * self.dp_size + dp_rank)

    def add_pass(self, worker: int, at_ms: float, fpm: ForwardPassMetrics) -> None:
        self.passes[_bin(at_ms, self.interval_ms)][self.engine(worker, fpm.dp_rank)].append(fpm)
        self.end_ms = max(self.end_ms, at_ms)

    def _request_bins(self, log: Any) -> tuple[_Bins, _Bins, _Bins]:
        firsts: _Bins = defaultdict(lambda: defaultdict(list))
        gaps: _Bins = defaultdict(lambda: defaultdict(list))
        done: _Bins = defaultdict(lambda: defaultdict(list))
        iv = self.interval_ms
        times = log.token_times
        for rid in range(log.n):
            if log.rejected[rid] or log.first[rid] < 0.0:
                continue
            e = self.engine(log.worker[rid], log.dp_rank[rid])
            arrival, first = log.arrival[rid], log.first[rid]
            cached = log.reused[rid]  # the report's prefix-cache hits (final admission)
            firsts[_bin(first, iv)][e].append(((first - arrival) / 1000.0, log.input_length[rid], cached))
            ts = times[rid] if times is not None else []
            for a, b in zip(ts, ts[1:], strict=False):
                gaps[_bin(b, iv)][e].append((b - a) / 1000.0)
            if log.done[rid] >= 0.0:
                admitted = log.admitted[rid] if log.admitted[rid] >= 0.0 else arrival
                last = log.last[rid]
                done[_bin(log.done[rid], iv)][e].append(FinishedRequest(
                    e2e_s=(log.done[rid] - arrival) / 1000.0, queue_s=(admitted - arrival) / 1000.0,
                    prefill_s=(first - admitted) / 1000.0, decode_s=(last - first) / 1000.0,
                    prompt_tokens=log.input_length[rid], generation_tokens=log.ntok[rid],
                    cached_tokens=cached))
            self.end_ms = max(self.end_ms, log.done[rid])
        return firsts, gaps, done

    def write(self, fh: IO[str], log: Any) -> int:
        """Scrape the run into ``fh``; returns the number of scrapes."""
        firsts, gaps, done = self._request_bins(log)
        m = self.metrics
        last = _bin(self.end_ms, self.interval_ms)
        points: dict[str, Any] = {}
        sweep = LoraSweep(log, self.lora_names) if m.lora_info is not None else None
        for k in range(1, last + 1):
            if sweep is not None:  # vllm:lora_requests_info (servesim_prometheus.lora_info)
                at_ms = k * self.interval_ms
                m.record_lora(*sweep.advance(at_ms), self.epoch_s + at_ms / 1000.0)
            for e, fpms in sorted(self.passes.get(k, {}).items()):
                m.record_passes(e, fpms)
            for e, items in sorted(firsts.get(k, {}).items()):
                m.record_first_tokens(e, [t for t, _, _ in items], sum(p for _, p, _ in items),
                                      sum(c for _, _, c in items))
            for e, values in sorted(gaps.get(k, {}).items()):
                m.record_tokens(e, values)
            for e, reqs in sorted(done.get(k, {}).items()):
                m.record_finished(e, reqs)
            if k == last and log.num_preemptions:
                m.record_preemptions(m.engines[0], log.num_preemptions)
            _snapshot(m, points, self.epoch_s + k * self.interval_ms / 1000.0, self.epoch_s)
        _write(fh, points)
        return last


def _escape(value: str) -> str:
    """An OpenMetrics label value: backslash, newline and double quote escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _snapshot(m: EngineMetrics, points: dict[str, Any], ts: float, epoch_s: float) -> None:
    """Append one scrape's samples to ``points``: family -> header, series -> [lines]."""
    stamp = f"{ts:.3f}"
    for fam in m.registry.collect():
        entry = points.setdefault(fam.name, {"type": fam.type, "help": fam.documentation,
                                             "series": defaultdict(list)})
        by_series: dict[tuple[tuple[str, str], ...], list[str]] = defaultdict(list)
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            value = epoch_s if s.name.endswith("_created") else s.value
            by_series[key].append(f"{s.name}{_labels(s.labels)} {floatToGoString(value)} {stamp}")
        for key, lines in by_series.items():
            entry["series"][key].append(lines)


def _write(fh: IO[str], points: dict[str, Any]) -> None:
    for name, entry in points.items():
        fh.write(f"# HELP {name} {entry['help']}\n# TYPE {name} {entry['type']}\n")
        for per_scrape in entry["series"].values():
            for lines in per_scrape:
                fh.write("\n".join(lines) + "\n")
    fh.write("# EOF\n")


__all__ = ["ReplayScrapes"]
