"""The serving report: vLLM ``bench serve`` key names plus simulator extras.

Definitions (dynamo-mocker.md §9.3; names per ecosystem.md §2): only admitted-and-completed
requests count. ``ttft = first token - arrival``; ``e2el = last token - arrival``;
``tpot = (last - first) / (n - 1)`` per request with ``n >= 2``; ``itl`` pools every gap between
consecutive tokens of those requests. ``duration`` is the largest completion time of a
completed request in simulated seconds (at least 1e-9). A completed request with no output
token counts in ``completed`` but contributes no latency sample.

The JSON holds no wall-clock value, so two runs of the same inputs produce identical bytes;
wall time appears only in the printed table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from servesim.config.sections import ReportConfig
from servesim.speculative import acceptance_report
from servesim.replay.stats import (
    RequestLog,
    distribution,
    percentile_key,
    sorted_weighted_distribution,
    weighted_sorted,
)

_DIGITS = 6


def _clean(value: Any) -> Any:
    """Round floats so tiny representation noise never reaches the JSON."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        r = round(value, _DIGITS)
        return 0.0 if r == 0 else r
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _per_request_arrays(log: RequestLog, mask: np.ndarray) -> dict[str, np.ndarray]:
    arrival = np.asarray(log.arrival)[mask]
    first = np.asarray(log.first)[mask]
    last = np.asarray(log.last)[mask]
    done = np.asarray(log.done)[mask]
    ntok = np.asarray(log.ntok, dtype=np.int64)[mask]
    return {"arrival": arrival, "first": first, "last": last, "done": done, "ntok": ntok}


def _gaps(log: RequestLog, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled inter-token gaps of completed requests as ``(values, weights)``, and each
    one's first gap (its time to second token), found as the first occurrence of its id in
    the individual gap log. Gaps shared by runs of passes (RequestLog.run_tokens) come with
    their weights; their requests always complete, so they need no mask.

    The individual log holds long stretches of equal gaps (the requests of one pass mostly
    emitted their previous token at the same earlier pass), so it is handed on run-length
    encoded: the statistics depend only on the multiset, and sorting the runs is far cheaper
    than sorting every gap."""
    itl = np.frombuffer(log.itl, dtype=np.float64)
    rids = np.frombuffer(log.itl_rid, dtype=np.int64)
    keep = mask[rids] if len(rids) else np.zeros(0, dtype=bool)
    itl, rids = itl[keep], rids[keep]
    ttst = itl[_first_occurrences(rids, log.n)]
    runs, lengths = _run_lengths(itl)
    values, weights = [runs], [lengths]
    shared = getattr(log, "shared_gap", None)
    if shared is not None and len(shared):
        values.append(np.frombuffer(shared, dtype=np.float64))
        weights.append(np.frombuffer(log.shared_weight, dtype=np.int64))
    return np.concatenate(values), np.concatenate(weights), ttst


def itl_samples(log: RequestLog) -> tuple[np.ndarray, np.ndarray]:
    """The pooled inter-token gaps of completed requests as ``(values, weights)``, as the
    report's ``itl`` statistics count them (for figures)."""
    values, weights, _ttst = _gaps(log, log.completed_mask())
    return values, weights


def _first_occurrences(ids: np.ndarray, n: int) -> np.ndarray:
    """Index of each distinct id's first occurrence in ``ids`` (ids in ``[0, n)``), in
    ascending id order: ``np.unique(ids, return_index=True)[1]`` without sorting."""
    size = len(ids)
    first = np.full(n, size, dtype=np.int64)
    np.minimum.at(first, ids, np.arange(size, dtype=np.int64))
    return first[first < size]


def _run_lengths(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(value, length)`` of each maximal stretch of equal consecutive values."""
    if not len(values):
        return values, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return values[starts], np.diff(np.append(starts, len(values)))


def _goodput(a: dict[str, np.ndarray], cfg: ReportConfig) -> np.ndarray:
    """Per-request SLA verdicts. A request without tokens is judged by its completion time."""
    has = a["ntok"] >= 1
    ttft = np.where(has, a["first"] - a["arrival"], a["done"] - a["arrival"])
    e2e = np.where(has, a["last"] - a["arrival"], a["done"] - a["arrival"])
    good = np.ones(len(ttft), dtype=bool)
    if cfg.sla_ttft_ms is not None:
        good &= ttft <= cfg.sla_ttft_ms
    if cfg.sla_e2e_ms is not None:
        good &= e2e <= cfg.sla_e2e_ms
    if cfg.sla_tpot_ms is not None:
        multi = a["ntok"] >= 2
        tpot = np.where(multi, (e2e - ttft) / np.maximum(a["ntok"] - 1, 1), 0.0)
        good &= ~multi | (tpot <= cfg.sla_tpot_ms)
    return good


def build_report(
    log: RequestLog, cfg: ReportConfig, resolved_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The report dict (floats rounded to 6 decimals; keys are sorted when written)."""
    mask = log.completed_mask()
    a = _per_request_arrays(log, mask)
    completed = int(mask.sum())
    n_in = int(np.asarray(log.input_length, dtype=np.int64)[mask].sum())
    n_out = int(a["ntok"].sum())
    duration_ms = float(a["done"].max()) if completed else 0.0
    dur_s = max(duration_ms / 1000.0, 1e-9)
    has = a["ntok"] >= 1
    multi = a["ntok"] >= 2
    ttft = (a["first"] - a["arrival"])[has]
    e2e = (a["last"] - a["arrival"])[has]
    tpot = ((a["last"] - a["first"])[multi]) / (a["ntok"][multi] - 1)
    itl, itl_w, ttst = _gaps(log, mask)
    reused = np.asarray(log.reused, dtype=np.int64)[mask].sum()
    first_reused = np.asarray([x or 0 for x in log.first_reused], dtype=np.int64)[mask].sum()
    pcts = list(cfg.percentiles)
    rep: dict[str, Any] = {
        "num_requests": log.n,
        "completed": completed,
        "failed": int(sum(log.rejected)),
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "duration": duration_ms / 1000.0,
        "duration_ms": duration_ms,
        "request_throughput": completed / dur_s,
        "input_throughput": n_in / dur_s,
        "output_throughput": n_out / dur_s,
        "total_token_throughput": (n_in + n_out) / dur_s,
        "max_concurrent_requests": log.max_in_flight,
        "max_output_tokens_per_s": max(log.tokens_per_second.values(), default=0),
        "prefix_cache_hit_rate": float(reused / n_in) if n_in else 0.0,
        "first_admission_prefix_cache_hit_rate": float(first_reused / n_in) if n_in else 0.0,
        "num_preemptions": log.num_preemptions,
        "percentiles": pcts,
    }
    for name, vals in (("ttft", ttft), ("tpot", tpot), ("e2el", e2e), ("ttst", ttst)):
        rep.update(distribution(name, vals, pcts))
    # Pooled samples are (value, weight) pairs: never one float per token (DESIGN.md §7).
    uniq, counts = weighted_sorted(itl, itl_w)
    rep.update(sorted_weighted_distribution("itl", uniq, counts, pcts))
    # The reference's output_token_throughput_per_user: 1000/x is non-increasing in x > 0,
    # so the reversed positive gaps give its values in non-decreasing order without a sort.
    positive = uniq > 0
    rep.update(sorted_weighted_distribution(
        "output_token_throughput_per_user", (1000.0 / uniq[positive])[::-1],
        counts[positive][::-1], pcts, unit=""))
    rep.update(_goodput_keys(a, cfg, dur_s))
    if log.spec_nextn:
        rep.update(acceptance_report(log.spec_drafts, log.spec_nextn, log.spec_accepted,
                                     log.spec_per_pos))
    rep["config"] = resolved_config if resolved_config is not None else {}
    return _clean(rep)


def _goodput_keys(a: dict[str, np.ndarray], cfg: ReportConfig, dur_s: float) -> dict[str, Any]:
    slas = {"ttft_ms": cfg.sla_ttft_ms, "tpot_ms": cfg.sla_tpot_ms, "e2el_ms": cfg.sla_e2e_ms}
    if all(v is None for v in slas.values()):
        return {"request_goodput": None, "goodput_completed": None,
                "goodput_output_throughput": None, "sla": None}
    good = _goodput(a, cfg)
    return {
        "request_goodput": int(good.sum()) / dur_s,
        "goodput_completed": int(good.sum()),
        "goodput_output_throughput": int(a["ntok"][good].sum()) / dur_s,
        "sla": {k: v for k, v in slas.items() if v is not None},
    }


def dumps(report: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(report, sort_keys=True, indent=2, allow_nan=False) + "\n"


def per_request_lines(log: RequestLog, session_ids: Sequence[str] | None = None) -> Iterable[str]:
    """One JSON object per request, sorted by (arrival, request id)."""
    order = sorted(range(log.n), key=lambda r: (log.arrival[r], r))
    for rid in order:
        first = log.first[rid]
        rec: dict[str, Any] = {
            "request_id": rid,
            "arrival_ms": log.arrival[rid],
            "first_token_ms": first if first >= 0 else None,
            "completion_ms": log.done[rid] if log.done[rid] >= 0 else None,
            "num_output_tokens": log.ntok[rid],
            "input_length": log.input_length[rid],
            "worker": log.worker[rid],
            "dp_rank": log.dp_rank[rid],
            "cached_tokens": log.cached_tokens(rid),
            "reused_input_tokens": log.reused[rid],
            "rejected": log.rejected[rid],
            "ttft_ms": first - log.arrival[rid] if first >= 0 else None,
            "e2el_ms": log.last[rid] - log.arrival[rid] if first >= 0 else None,
        }
        extra = getattr(log, "extra", None)  # disaggregated replay's handoff fields
        if extra is not None:
            for key, values in extra.items():
                rec[key] = values[rid]
        if session_ids is not None:
            rec["session_id"] = session_ids[rid]
        if log.token_times is not None:
            rec["token_times_ms"] = log.token_times[rid]
        yield json.dumps(_clean(rec), sort_keys=True)


def format_table(report: dict[str, Any], wall_s: float | None = None) -> str:
    """An aligned plain-text table in the layout of ``vllm bench serve``'s console summary."""
    rows: list[tuple[str, Any]] = [
        ("Successful requests", report["completed"]),
        ("Failed (rejected) requests", report["failed"]),
        ("Simulated duration (s)", report["duration"]),
    ]
    if wall_s is not None:
        rows.append(("Wall time (s)", wall_s))
    rows += [
        ("Total input tokens", report["total_input_tokens"]),
        ("Total generated tokens", report["total_output_tokens"]),
        ("Request throughput (req/s)", report["request_throughput"]),
        ("Output token throughput (tok/s)", report["output_throughput"]),
        ("Total token throughput (tok/s)", report["total_token_throughput"]),
        ("Prefix cache hit rate", report["prefix_cache_hit_rate"]),
        ("Preemptions", report["num_preemptions"]),
    ]
    if report.get("goodput_completed") is not None:
        rows.append(("Good requests (SLA)", report["goodput_completed"]))
        rows.append(("Request goodput (req/s)", report["request_goodput"]))
    titles = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)",
              "itl": "Inter-token Latency", "e2el": "End-to-end Latency"}
    sections: list[tuple[str, list[tuple[str, Any]]]] = [("Serving Benchmark Result", rows)]
    for m, title in titles.items():
        sec = [(f"Mean {m.upper()} (ms)", report[f"mean_{m}_ms"]),
               (f"Median {m.upper()} (ms)", report[f"median_{m}_ms"])]
        for p in report.get("percentiles", []):
            if p == 50:
                continue  # the median row already shows it
            k = percentile_key(p)
            sec.append((f"{k.upper()} {m.upper()} (ms)", report[f"{k}_{m}_ms"]))
        sections.append((title, sec))
    if "num_handoffs" in report:  # a prefill/decode split (servesim.replay.disagg)
        util = report["worker_utilization"]
        sections.append(("Disaggregated prefill/decode", [
            ("Handoffs", report["num_handoffs"]),
            ("Mean KV transfer (ms)", report["mean_kv_transfer_ms"]),
            ("Mean TTFT: prefill (ms)", report["mean_ttft_prefill_ms"]),
            ("Mean TTFT: transfer (ms)", report["mean_ttft_transfer_ms"]),
            ("Mean TTFT: decode (ms)", report["mean_ttft_decode_ms"]),
            ("Prefill worker utilization", util["prefill"]),
            ("Decode worker utilization", util["decode"]),
        ]))
    if "pools" in report:  # a heterogeneous cluster (servesim.replay.pools)
        from servesim.replay.pools import format_pools

        sections.append(("Pools", format_pools(report["pools"])))
    sections += _feature_sections(report)
    return _render(sections)


def _feature_sections(report: dict[str, Any]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Speculative decoding and host-tier rows, when the report has them."""
    out: list[tuple[str, list[tuple[str, Any]]]] = []
    if report.get("spec_decode_num_drafts"):
        out.append(("Speculative decoding", [
            ("Drafts (verification forwards)", report["spec_decode_num_drafts"]),
            ("Mean acceptance length", report["spec_decode_mean_acceptance_length"]),
            ("Draft acceptance rate", report["spec_decode_draft_acceptance_rate"]),
        ]))
    host = report.get("host_offload")
    if host is not None:
        out.append(("Host KV tier", [
            ("Prefix hit rate, device (G1)", report["prefix_cache_hit_rate_g1"]),
            ("Prefix hit rate, host", report["prefix_cache_hit_rate_host"]),
            ("Blocks stored to host", host["stored_blocks"]),
            ("Blocks loaded from host", host["loaded_blocks"]),
        ]))
    return out


def _render(sections: list[tuple[str, list[tuple[str, Any]]]]) -> str:
    width = 60
    lines: list[str] = []
    for title, rows in sections:
        lines.append(f"{' ' + title + ' ':=^{width}}" if not lines else f"{title:-^{width}}")
        for label, value in rows:
            text = f"{value:.2f}" if isinstance(value, float) else str(value)
            lines.append(f"{label + ':':<{width - 14}}{text:>14}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"
