"""Benchmark results to calibrate against: the load each one ran, and what it measured.

* ``vllm bench serve --save-result`` JSON: ``num_prompts``, ``request_rate``, ``burstiness``,
  ``max_concurrency``, ``mean_ttft_ms`` and ``mean_tpot_ms`` (``vllm/benchmarks/serve.py``,
  ``main_async``); the random dataset's options are not saved, so they come from
  ``--metadata`` keys of the same names (``random_input_len=1024`` ...) or from the
  command's ``--client`` file. With ``--save-detailed`` the file also lists every request's
  ``input_lens`` and ``output_lens``, which are then replayed as they are, and (vLLM 0.32)
  its ``start_times`` (when it was sent, in seconds) and ``queue_times`` (how long it waited
  for the ``--max-concurrency`` semaphore before that): each request is replayed as due at
  its start time less its queue time, the client's own schedule.
* a table (``.csv`` or ``.jsonl``): one result per row, the ``bench_client`` options by
  name (``random_input_len``, ``num_prompts``, ``max_concurrency`` ...) and the measured
  ``mean_ttft_ms`` and ``mean_tpot_ms``.
* AIPerf's ``profile_export_aiperf.json`` (:mod:`servesim_overhead.aiperf`).
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Any

from attrs import frozen

from servesim.errors import UserError
from servesim_overhead import aiperf

CLIENT_KEYS = ("random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len", "num_prompts",
               "max_concurrency", "request_rate", "burstiness", "seed", "special_tokens", "client",
               "chat_template_tokens", "vocab_size")


@frozen
class Result:
    name: str
    client: dict[str, Any]
    measured_ttft_ms: float
    measured_tpot_ms: float
    lengths: tuple[tuple[int, int], ...] | None = None  # (input, output) per request, when saved
    send_times_ms: tuple[float, ...] | None = None  # when each was due, from the first, when saved


def _measured(rec: dict[str, Any], where: str) -> tuple[float, float]:
    try:
        ttft, tpot = float(rec["mean_ttft_ms"]), float(rec["mean_tpot_ms"])
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{where}: needs numeric mean_ttft_ms and mean_tpot_ms") from None
    if not (ttft > 0 and tpot > 0):
        raise UserError(f"{where}: mean_ttft_ms and mean_tpot_ms must be > 0")
    return ttft, tpot


def _client(rec: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    out = {**defaults, "ignore_eos": True}
    for key in CLIENT_KEYS:
        if rec.get(key) not in (None, ""):
            out[key] = rec[key]
    if out.get("max_concurrency") in (None, "", "None"):
        out.pop("max_concurrency", None)
    return out


def read(path: str, defaults: dict[str, Any]) -> list[Result]:
    """The results in ``path`` (UserError naming the file for anything unreadable)."""
    if not os.path.isfile(path):
        raise UserError(f"no such results file {path!r}")
    try:
        with open(path, encoding="utf-8") as fh:
            if path.endswith(".csv"):
                records = list(csv.DictReader(fh))
            elif path.endswith(".jsonl"):
                records = [json.loads(line) for line in fh if line.strip()]
            else:
                records = [json.load(fh)]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: cannot read results: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise UserError(f"{path}: cannot read results: JSON nested too deeply to read") from None
    out = []
    for i, rec in enumerate(records):
        where = f"{path}:{i + 1}" if len(records) > 1 else path
        if not isinstance(rec, dict):
            raise UserError(f"{where}: expected an object of results")
        if aiperf.is_aiperf(rec):
            client, ttft, tpot, saved, sends = aiperf.read(path, rec, defaults)
            out.append(Result(where, client, ttft, tpot, saved, sends))
            continue
        ttft, tpot = _measured(rec, where)
        lengths = sends = None
        if isinstance(rec.get("input_lens"), list) and isinstance(rec.get("output_lens"), list):
            ins = _numbers(rec["input_lens"], "input_lens", where, int)
            outs = _numbers(rec["output_lens"], "output_lens", where, int)
            if len(ins) != len(outs):
                raise UserError(f"{where}: input_lens and output_lens differ in length "
                                f"({len(ins)}, {len(outs)})")
            lengths = tuple(zip(ins, outs, strict=True))
            sends = _send_times(rec, len(ins), where)
        out.append(Result(where, _client(rec, defaults), ttft, tpot, lengths, sends))
    return out


def _numbers(values: list[Any], key: str, where: str, kind: Any = float) -> list[Any]:
    try:
        return [kind(x) for x in values]
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{where}: {key} must be a list of numbers") from None


def _send_times(rec: dict[str, Any], n: int, where: str) -> tuple[float, ...] | None:
    """When each request was due (ms from the first): its ``start_times`` less its
    ``queue_times``; None where the file lacks them (or lacks the queue times while a
    semaphore made requests wait, so that the start times are not the schedule)."""
    if not isinstance(rec.get("start_times"), list):
        return None
    starts = _numbers(rec["start_times"], "start_times", where)
    if isinstance(rec.get("queue_times"), list):  # None where a request did not wait
        queues = _numbers([0.0 if q is None else q for q in rec["queue_times"]], "queue_times", where)
    elif rec.get("max_concurrency") in (None, "", "None"):
        queues = [0.0] * n
    else:
        return None
    if len(starts) != n or len(queues) != n:
        raise UserError(f"{where}: start_times and queue_times need one entry per request ({n})")
    due = [s - q for s, q in zip(starts, queues, strict=True)]
    if not all(map(math.isfinite, due)):
        raise UserError(f"{where}: start_times and queue_times must be finite")
    first = min(due, default=0.0)
    return tuple((d - first) * 1000.0 for d in due)
