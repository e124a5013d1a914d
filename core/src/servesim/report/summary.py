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

from servesim.config.sections import ReportConfig
from servesim.mechanics.speculative import acceptance_report
from servesim.report.stats import (
    RequestLog,
    distribution,
    in_arrays,
    percentile_key,
    sorted_weighted_distribution,
    weighted_sorted,
)

_DIGITS = 6


def clean_floats(value: Any) -> Any:
    """Round floats so tiny representation noise never reaches the JSON."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        r = round(value, _DIGITS)
        return 0.0 if r == 0 else r
    if isinstance(value, dict):
        return {k: clean_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_floats(v) for v in value]
    return value


def gaps(log: RequestLog, flags: Sequence[bool]) -> tuple[list[float], list[int], list[float]]:
    """Pooled inter-token gaps of completed requests (``flags``) as ``(values, weights)``, and
    each one's first gap (its time to second token): the first of its id in the individual
    gap log. Gaps shared by runs of passes (RequestLog.run_tokens) come with their weights;
    their requests always complete, so they need no mask. (Large logs:
    :func:`servesim.report.summary_arrays.gaps`.)"""
    itl = log.itl.tolist()
    rids = log.itl_rid.tolist()
    if not all(flags):
        kept = [(g, r) for g, r in zip(itl, rids) if flags[r]]
        itl = [g for g, _ in kept]
        rids = [r for _, r in kept]
    # Walking the log backwards, a request's first gap is the last one written.
    first = dict(zip(reversed(rids), reversed(itl)))
    ttst = [first[r] for r in sorted(first)]
    values, weights = itl, [1] * len(itl)
    shared = getattr(log, "shared_gap", None)
    if shared is not None and len(shared):
        values = values + shared.tolist()
        weights = weights + log.shared_weight.tolist()
    return values, weights, ttst


def list_samples(log: RequestLog, cfg: ReportConfig, slas: bool) -> dict[str, Any]:
    """What the report is computed from: totals, per-request latency samples (``ttft``,
    ``tpot``, ``e2el``, ``ttst``), the pooled gaps ``itl`` and their per-user throughputs
    ``per_user`` as ascending (value, weight) lists, and with ``slas`` the good requests and
    their tokens. Only admitted-and-completed requests count."""
    flags = log.completed_flags()
    idx = [i for i, ok in enumerate(flags) if ok]
    arrival, first, last = log.arrival, log.first, log.last
    ntok = log.ntok
    has = [i for i in idx if ntok[i] >= 1]
    multi = [i for i in has if ntok[i] >= 2]
    itl, itl_w, ttst = gaps(log, flags)
    uniq, counts = weighted_sorted(itl, itl_w)
    # The reference's output_token_throughput_per_user: 1000/x is non-increasing in x > 0,
    # so the reversed positive gaps give its values in non-decreasing order without a sort.
    positive = [(1000.0 / u, c) for u, c in zip(uniq, counts) if u > 0][::-1]
    out: dict[str, Any] = {
        "completed": len(idx),
        "n_in": sum(log.input_length[i] for i in idx),
        "n_out": sum(ntok[i] for i in idx),
        "duration_ms": max(log.done[i] for i in idx) if idx else 0.0,
        "reused": sum(log.reused[i] for i in idx),
        "first_reused": sum(log.first_reused[i] or 0 for i in idx),
        "ttft": [first[i] - arrival[i] for i in has],
        "tpot": [(last[i] - first[i]) / (ntok[i] - 1) for i in multi],
        "e2el": [last[i] - arrival[i] for i in has],
        "ttst": ttst,
        "itl": (uniq, counts),
        "per_user": ([v for v, _ in positive], [c for _, c in positive]),
        "good": _goodput(log, idx, cfg) if slas else None,
    }
    return out


def _goodput(log: RequestLog, idx: Sequence[int], cfg: ReportConfig) -> tuple[int, int]:
    """Good requests under the SLAs and their output tokens. A request without tokens is
    judged by its completion time."""
    good = tokens = 0
    for i in idx:
        if meets_slas(log, i, cfg):
            good += 1
            tokens += log.ntok[i]
    return good, tokens


def meets_slas(log: RequestLog, i: int, cfg: ReportConfig) -> bool:
    """Whether completed request ``i`` meets every SLA of ``cfg`` (unset ones are not checked;
    a request without tokens is judged by its completion time)."""
    n = log.ntok[i]
    arrival = log.arrival[i]
    ttft = (log.first[i] if n >= 1 else log.done[i]) - arrival
    e2e = (log.last[i] if n >= 1 else log.done[i]) - arrival
    if cfg.sla_ttft_ms is not None and not ttft <= cfg.sla_ttft_ms:
        return False
    if cfg.sla_e2e_ms is not None and not e2e <= cfg.sla_e2e_ms:
        return False
    return not (cfg.sla_tpot_ms is not None and n >= 2 and not (e2e - ttft) / (n - 1) <= cfg.sla_tpot_ms)


def itl_samples(log: RequestLog) -> tuple[Any, Any]:
    """The pooled inter-token gaps of completed requests as numpy ``(values, weights)``, as
    the report's ``itl`` statistics count them (for figures)."""
    from servesim.report.summary_arrays import itl_samples as samples

    return samples(log)


def build_report(
    log: RequestLog, cfg: ReportConfig, resolved_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The report dict (floats rounded to 6 decimals; keys are sorted when written). Large
    logs are summarised in numpy (:mod:`servesim.report.summary_arrays`), small ones in plain
    Python; both give the same report, bit for bit."""
    slas = {"ttft_ms": cfg.sla_ttft_ms, "tpot_ms": cfg.sla_tpot_ms, "e2el_ms": cfg.sla_e2e_ms}
    any_sla = any(v is not None for v in slas.values())
    shared = getattr(log, "shared_gap", None)
    if in_arrays(log.n + len(log.itl) + (len(shared) if shared is not None else 0)):
        from servesim.report.summary_arrays import report_samples

        s = report_samples(log, cfg, any_sla)
    else:
        s = list_samples(log, cfg, any_sla)
    return report_from_samples(log, cfg, s, slas, resolved_config)


def report_from_samples(log: RequestLog, cfg: ReportConfig, s: dict[str, Any],
                        slas: dict[str, float | None],
                        resolved_config: dict[str, Any] | None) -> dict[str, Any]:
    """The report of :func:`list_samples` (or its numpy version's) ``s``."""
    completed, n_in, n_out = s["completed"], s["n_in"], s["n_out"]
    duration_ms = s["duration_ms"]
    dur_s = max(duration_ms / 1000.0, 1e-9)
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
        "prefix_cache_hit_rate": s["reused"] / n_in if n_in else 0.0,
        "first_admission_prefix_cache_hit_rate": s["first_reused"] / n_in if n_in else 0.0,
        "num_preemptions": log.num_preemptions,
        "percentiles": pcts,
    }
    for name in ("ttft", "tpot", "e2el", "ttst"):
        rep.update(distribution(name, s[name], pcts))
    # Pooled samples are (value, weight) pairs: never one float per token (docs/architecture.md, "Speed by design").
    uniq, counts = s["itl"]
    rep.update(sorted_weighted_distribution("itl", uniq, counts, pcts))
    per_user, per_user_counts = s["per_user"]
    rep.update(sorted_weighted_distribution("output_token_throughput_per_user", per_user,
                                            per_user_counts, pcts, unit=""))
    if s["good"] is None:
        rep.update({"request_goodput": None, "goodput_completed": None,
                    "goodput_output_throughput": None, "sla": None})
    else:
        good, tokens = s["good"]
        rep.update({
            "request_goodput": good / dur_s,
            "goodput_completed": good,
            "goodput_output_throughput": tokens / dur_s,
            "sla": {k: v for k, v in slas.items() if v is not None},
        })
    if log.spec_nextn:
        rep.update(acceptance_report(log.spec_drafts, log.spec_nextn, log.spec_accepted,
                                     log.spec_per_pos))
    rep["config"] = resolved_config if resolved_config is not None else {}
    return clean_floats(rep)


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
        yield json.dumps(clean_floats(rec), sort_keys=True)


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
    out += scenario_sections(report)
    host = report.get("host_offload")
    if host is not None:
        out.append(("Host KV tier", [
            ("Prefix hit rate, device (G1)", report["prefix_cache_hit_rate_g1"]),
            ("Prefix hit rate, host", report["prefix_cache_hit_rate_host"]),
            ("Blocks stored to host", host["stored_blocks"]),
            ("Blocks loaded from host", host["loaded_blocks"]),
        ]))
    return out


def scenario_sections(report: dict[str, Any]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Per-class, LoRA and elastic-cluster rows, when the report has those sections
    (workload.classes, engine.enable_lora, lifecycle/planner/faults)."""
    out: list[tuple[str, list[tuple[str, Any]]]] = []
    classes = report.get("classes")
    if classes:
        rows: list[tuple[str, Any]] = []
        for name, c in classes.items():
            rows.append((f"[{name}] completed / submitted", f"{c['completed']} / {c['submitted']}"))
            if c.get("p99_ttft_ms") is not None:
                rows.append((f"[{name}] P99 TTFT (ms)", c["p99_ttft_ms"]))
            if c.get("sla_attainment") is not None:
                rows.append((f"[{name}] SLA attainment", c["sla_attainment"]))
        out.append(("SLO classes", rows))
    lora = report.get("lora")
    if isinstance(lora, dict) and "gpu_loads" in lora:
        out.append(("LoRA adapters", [
            ("Adapter loads into GPU slots", lora["gpu_loads"]),
            ("Adapter loads from disk", lora["disk_loads"]),
            ("Adapter load time (ms)", lora["load_ms"]),
        ]))
    elastic = report.get("elastic")
    if isinstance(elastic, dict):
        reqs = elastic.get("requests", {})
        rows = [("GPU-seconds", elastic["gpu_seconds"]),
                ("Scaling actions", len(elastic.get("scaling", ()))),
                ("Requests failed / retried", f"{reqs.get('failed', 0)} / {reqs.get('retried', 0)}")]
        faults = elastic.get("faults")
        if faults:
            rows.append(("Crashes / restarts", f"{faults.get('crashes', 0) + faults.get('random_crashes', 0)}"
                                                f" / {faults.get('restarts', 0)}"))
        out.append(("Elastic cluster", rows))
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


def format_pools(pools: Sequence[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Rows of the printed table's pool section."""
    rows: list[tuple[str, Any]] = []
    for p in pools:
        tag = f"[{p['name']}]"
        rows += [
            (f"{tag} workers / GPUs", f"{p['workers']} / {p['gpus']}"),
            (f"{tag} completed", p["completed"]),
            (f"{tag} output tok/s (per GPU)", f"{p['output_throughput']:.2f} "
                                               f"({p['output_throughput_per_gpu']:.2f})"),
            (f"{tag} mean TTFT / TPOT (ms)", f"{p['mean_ttft_ms']:.2f} / {p['mean_tpot_ms']:.2f}"),
            (f"{tag} utilization", p["utilization"]),
        ]
    return rows
