"""AIPerf's exports as benchmark results (``aiperf profile``, ai-dynamo/aiperf).

* ``profile_export_aiperf.json``: one object of aggregated metrics, each ``{"unit": ...,
  "avg": ...}``, and ``input_config``, the run's user configuration. The measured means are
  ``time_to_first_token.avg`` and ``inter_token_latency.avg`` (AIPerf's inter-token latency
  is ``(request_latency - time_to_first_token) / (output_sequence_length - 1)`` per request,
  what ``vllm bench serve`` calls TPOT). The load comes from ``input_config``
  (``src/aiperf/common/config/``: ``input.prompt.input_tokens.{mean,stddev}``,
  ``input.prompt.output_tokens.{mean,stddev}``, ``input.random_seed``,
  ``loadgen.{concurrency,request_count,request_rate,arrival_pattern,arrival_smoothness}``).
* ``profile_export.jsonl`` beside it: one record per request; where it exists, the profiling
  phase's successful requests' ``input_sequence_length`` and ``output_sequence_length`` are
  replayed as they are (warm-up requests are left out, as AIPerf leaves them out of its
  metrics). Each record's ``metadata.request_start_ns`` (AIPerf's ``MetricRecordMetadata``:
  when the request was sent) is replayed as its send time. Under ``--concurrency`` with
  ``--request-rate`` AIPerf sleeps, then waits for a slot, then sends, and a wait delays the
  rest of its schedule ("sleep-then-gate", no catch-up: AIPerf
  ``docs/tutorials/request-rate-concurrency.md``), unlike ``vllm bench serve``, whose requests
  keep their send times and queue for a slot; its recorded sends are therefore the schedule to
  replay, under the same limit, and the rate's draws (vLLM's rule) are used only without them.

Synthetic lengths with a standard deviation need the per-request file: AIPerf draws them from
a normal distribution, which the ``bench_client`` load does not.
"""

from __future__ import annotations

import math
import os
from typing import Any

from servesim.errors import UserError
from servesim.workload.textlines import iter_text_lines, json_values

RECORDS = "profile_export.jsonl"


def is_aiperf(rec: Any) -> bool:
    """Whether a JSON object is AIPerf's aggregated export."""
    return isinstance(rec, dict) and isinstance(rec.get("input_config"), dict) and \
        isinstance(rec.get("time_to_first_token"), dict)


def _get(rec: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(key)
    return rec


def _avg(rec: dict[str, Any], metric: str, where: str) -> float:
    value = _get(rec, metric, "avg")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"{where}: needs a positive {metric}.avg (an AIPerf profile export with streaming)")
    return float(value)


def _records(path: str) -> tuple[tuple[tuple[int, int], ...] | None, tuple[float, ...] | None]:
    """Per profiling request: its (input, output) lengths, and when it was sent (ms from the
    first) where every record says so; (None, None) without the records file."""
    records = os.path.join(os.path.dirname(path) or ".", RECORDS)
    if not os.path.isfile(records):
        return None, None
    out = []
    starts: list[int] | None = []
    for n, rec in json_values(iter_text_lines(records, "AIPerf records"), records):
        if not isinstance(rec, dict):
            raise UserError(f"{records}:{n}: expected a JSON object")
        if rec.get("error") or _get(rec, "metadata", "benchmark_phase") not in (None, "profiling"):
            continue
        isl = _get(rec, "metrics", "input_sequence_length", "value")
        osl = _get(rec, "metrics", "output_sequence_length", "value")
        if not isinstance(isl, (int, float)) or not isinstance(osl, (int, float)):
            raise UserError(f"{records}:{n}: needs metrics.input_sequence_length and "
                            "metrics.output_sequence_length values")
        out.append((int(isl), int(osl)))
        start = _get(rec, "metadata", "request_start_ns")
        if starts is not None and isinstance(start, int) and not isinstance(start, bool):
            starts.append(start)
        else:
            starts = None
    if not out:
        return None, None
    sends = None if not starts else tuple((s - min(starts)) / 1e6 for s in starts)
    return tuple(out), sends


def client(rec: dict[str, Any], defaults: dict[str, Any], where: str, lengths: bool) -> dict[str, Any]:
    """The ``bench_client`` options of the run ``input_config`` describes."""
    cfg = rec["input_config"]
    out: dict[str, Any] = {"client": "vllm", "random_range_ratio": 0.0, **defaults, "ignore_eos": True}
    isl = _get(cfg, "input", "prompt", "input_tokens", "mean")
    osl = _get(cfg, "input", "prompt", "output_tokens", "mean")
    if isl is not None:
        out["random_input_len"] = int(isl)
    if osl is not None:
        out["random_output_len"] = int(osl)
    spread = [_get(cfg, "input", "prompt", k, "stddev") or 0 for k in ("input_tokens", "output_tokens")]
    if any(spread) and not lengths:
        raise UserError(f"{where}: AIPerf drew lengths with a standard deviation; put its {RECORDS} "
                        "beside it to replay each request's lengths")
    seed = _get(cfg, "input", "random_seed")
    if seed is not None:
        out["seed"] = int(seed)
    loadgen = cfg.get("loadgen") or {}
    conc = loadgen.get("concurrency")
    if isinstance(conc, list):
        raise UserError(f"{where}: a concurrency sweep exports one file per value; pass those files")
    if conc is not None:
        out["max_concurrency"] = int(conc)
    count = loadgen.get("request_count") or _get(rec, "request_count", "avg")
    if count is not None:
        out["num_prompts"] = int(count)
    rate = loadgen.get("request_rate")
    out["request_rate"] = "inf" if rate is None else float(rate)
    if rate is not None:
        pattern = str(loadgen.get("arrival_pattern") or loadgen.get("request_rate_mode") or "poisson").lower()
        if pattern == "gamma":
            out["burstiness"] = float(loadgen.get("arrival_smoothness") or 1.0)
        elif pattern != "poisson":
            raise UserError(f"{where}: AIPerf's {pattern!r} arrival pattern is not a bench_client load "
                            "(poisson and gamma are)")
    return out


Lengths = tuple[tuple[int, int], ...]


def read(path: str, rec: dict[str, Any], defaults: dict[str, Any]
         ) -> tuple[dict[str, Any], float, float, Lengths | None, tuple[float, ...] | None]:
    """(client options, measured mean TTFT, measured mean TPOT, per-request lengths or None,
    their send times or None)."""
    ttft = _avg(rec, "time_to_first_token", path)
    tpot = _avg(rec, "inter_token_latency", path)
    lengths, sends = _records(path)
    return client(rec, defaults, path, lengths is not None), ttft, tpot, lengths, sends
