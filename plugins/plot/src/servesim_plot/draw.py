"""Drawing: the series of :mod:`servesim_plot.series` as PNG files, with matplotlib's Agg
canvas (no display, no pyplot state). matplotlib is imported here only, when a figure is
drawn. The PNGs carry no software version or date, so equal data give equal files on one
matplotlib version.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from servesim.errors import UserError

from servesim_plot import elastic as E
from servesim_plot import series as S
from servesim_plot.data import PlotData

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:cyan")
DPI = 100


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig: Figure, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    try:
        fig.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def write_figures(data: PlotData, out_dir: str, compare: PlotData | None = None) -> list[str]:
    """Every figure ``data`` supports, written under ``out_dir``; returns the paths."""
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    paths = [_save(latency_figure(data, compare), out_dir, "latency_cdf.png")]
    for worker in S.workers_of(data):
        paths.append(_save(timeline_figure(data, worker), out_dir, f"timeline_worker{worker}.png"))
    req = data.requests
    if req is not None:
        breakdown = S.ttft_breakdown(req)
        if breakdown is not None and len(breakdown.prefill):
            paths.append(_save(breakdown_figure(breakdown), out_dir, "ttft_breakdown.png"))
        balance = S.worker_balance(req)
        if len(balance.workers) > 1:
            paths.append(_save(balance_figure(balance), out_dir, "workers.png"))
    elastic = E.elastic_series(data)
    if elastic is not None:
        paths.append(_save(elastic_figure(elastic), out_dir, "elastic.png"))
    return paths


def _draw_cdf(ax: Axes, cdf: S.Cdf, color: str, label: str) -> None:
    if cdf.exact:
        ax.step(cdf.x, cdf.y, where="post", color=color, label=label, linewidth=1.4)
    else:
        ax.plot(cdf.x, cdf.y, "o--", color=color, label=f"{label} (report percentiles)")
    for p, v in cdf.marks.items():
        ax.plot([v], [p / 100.0], "o", color=color, markersize=5)
        ax.annotate(f"p{p:g} {v:.1f}", (v, p / 100.0), textcoords="offset points",
                    xytext=(6, -10), fontsize=7, color=color)


def latency_figure(data: PlotData, compare: PlotData | None = None) -> Figure:
    """TTFT, TPOT, ITL and E2E CDFs, p50/p90/p99 marked, SLA thresholds as dashed lines."""
    fig = _figure(10, 7)
    axes = fig.subplots(2, 2)
    cdfs = S.latency_cdfs(data)
    other = S.latency_cdfs(compare) if compare is not None else None
    slas = S.sla_lines(data.report)
    for ax, metric in zip(axes.flat, S.METRICS, strict=True):
        cdf = cdfs[metric]
        if cdf is not None and len(cdf.x):
            _draw_cdf(ax, cdf, COLORS[0], data.label)
        if other is not None and compare is not None:
            ocdf = other[metric]
            if ocdf is not None and len(ocdf.x):
                _draw_cdf(ax, ocdf, COLORS[1], compare.label)
        if metric in slas:
            ax.axvline(slas[metric], color="tab:red", linestyle="--", linewidth=1,
                       label=f"SLA {slas[metric]:g} ms")
        ax.set_title(TITLES[metric])
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of samples")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Latency distributions")
    return fig


def timeline_figure(data: PlotData, worker: str) -> Figure:
    """One worker over simulated time, one colour per dp rank: running and waiting requests
    with arrivals (ticks) and preemptions (red triangles), KV cache usage (or, from an FPM
    file, the context tokens the batch holds), batch tokens."""
    keys = [k for k in data.ranks if k[0] == worker]
    fig = _figure(11, 7.5)
    ax_req, ax_kv, ax_tok = fig.subplots(3, 1, sharex=True)
    arrivals_drawn = False
    usage_known = True
    for i, key in enumerate(keys):
        tl = S.rank_timeline(data, key)
        color = COLORS[i % len(COLORS)]
        tag = f" dp{key[1]}" if len(keys) > 1 else ""
        t = tl.t_ms / 1000.0
        ax_req.step(t, tl.running, where="post", color=color, label=f"running{tag}")
        ax_req.step(t, tl.waiting, where="post", color=color, linestyle=":",
                    label=f"waiting{tag}")
        if len(tl.preempt_ms):
            top = max(float(tl.running.max(initial=0)), float(tl.waiting.max(initial=0)), 1.0)
            ax_req.plot(tl.preempt_ms / 1000.0, [top * 1.05] * len(tl.preempt_ms), "v",
                        color="tab:red", markersize=4, label=f"preemption{tag}")
        if not arrivals_drawn and len(tl.arrivals_ms):
            ax_req.plot(tl.arrivals_ms / 1000.0, [-0.5] * len(tl.arrivals_ms), "|",
                        color="0.4", markersize=6, label="arrival")
            arrivals_drawn = True
        if tl.kv_usage is not None:
            ax_kv.step(t, 100.0 * tl.kv_usage, where="post", color=color, label=f"KV{tag}")
        else:
            usage_known = False
            ax_kv.step(t, tl.kv_tokens, where="post", color=color, label=f"context{tag}")
        ax_tok.plot(t, tl.batch_tokens, ".", color=color, markersize=2, label=f"tokens{tag}")
    ax_req.set_ylabel("requests")
    ax_kv.set_ylabel("KV blocks in use (%)" if usage_known else "context tokens in batch")
    ax_tok.set_ylabel("batch tokens per pass")
    ax_tok.set_yscale("symlog", linthresh=10.0)
    ax_tok.set_xlabel("simulated time (s)")
    for ax in (ax_req, ax_kv, ax_tok):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    role = S.worker_role(data, worker)
    fig.suptitle(f"Worker {worker} timeline" + (f" ({role})" if role else ""))
    return fig


def breakdown_figure(b: S.TtftBreakdown) -> Figure:
    """Each handed-off request's TTFT as stacked prefill, transfer and first-decode parts,
    requests sorted by TTFT so the tail's make-up shows on the right."""
    import numpy as np

    fig = _figure(10, 5)
    ax = fig.subplots()
    x = np.arange(len(b.prefill))
    parts: list[tuple[str, Any]] = [("prefill", b.prefill), ("transfer", b.transfer),
                                    ("first decode", b.decode)]
    base = np.zeros(len(x))
    for (name, part), color in zip(parts, COLORS, strict=False):
        ax.fill_between(x, base, base + part, step="post", color=color, alpha=0.8,
                        label=f"{name} (mean {float(part.mean()):.1f} ms)")
        base = base + part
    ax.set_xlabel("requests, sorted by TTFT")
    ax.set_ylabel("ms")
    ax.set_title("TTFT breakdown (prefill/decode split)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def balance_figure(b: S.WorkerBalance) -> Figure:
    """Completed requests and prefix-cache hit rate per worker (router balance)."""
    fig = _figure(10, 4)
    ax_n, ax_hit = fig.subplots(1, 2)
    labels = [str(w) for w in b.workers]
    ax_n.bar(labels, b.requests, color=COLORS[0])
    ax_n.set_title("completed requests per worker")
    ax_hit.bar(labels, b.hit_rate, color=COLORS[2])
    ax_hit.set_ylim(0, 1)
    ax_hit.set_title("prefix-cache hit rate per worker")
    for ax in (ax_n, ax_hit):
        ax.set_xlabel("worker")
        ax.grid(alpha=0.3, axis="y")
    return fig


#: A colour per worker state (servesim_plot.elastic.STATES).
STATE_COLORS = {"ready": "tab:green", "warmup": "tab:olive", "starting": "tab:orange",
                "draining": "tab:purple", "restarting": "tab:red"}


def elastic_figure(es: E.ElasticSeries) -> Figure:
    """An elastic replay: each pool's workers stacked by state over simulated time, then (with
    per-request times) the offered load and the p99 TTFT per interval, SLA dashed."""
    import numpy as np

    rows = len(es.pools) + (2 if es.arrivals_per_s is not None else 0)
    fig = _figure(11, 1.0 + 2.3 * rows)
    axes = list(fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0])
    for ax, pool in zip(axes, es.pools, strict=False):
        t = np.append(pool.t_ms, max(es.end_ms, float(pool.t_ms[-1]))) / 1000.0
        base = np.zeros(len(t))
        for state in E.STATES:
            counts = pool.counts[state]
            if counts.any():
                top = base + np.append(counts, counts[-1])
                ax.fill_between(t, base, top, step="post", color=STATE_COLORS[state], alpha=0.85,
                                linewidth=0, label=state)
                base = top
        ax.set_ylabel(f"workers ({pool.name})")
        ax.set_ylim(0, max(1.0, float(base.max())) * 1.15)
    if es.arrivals_per_s is not None and es.p99_ttft_ms is not None:
        ax_load, ax_ttft = axes[-2], axes[-1]
        edges = np.append(es.starts_ms, es.starts_ms[-1] + es.interval_ms) / 1000.0
        ax_load.stairs(es.arrivals_per_s, edges, color=COLORS[0], label="arrivals")
        ax_load.set_ylabel("offered load (req/s)")
        centres = (es.starts_ms + es.interval_ms / 2.0) / 1000.0
        ax_ttft.plot(centres, es.p99_ttft_ms, "o-", color=COLORS[1], markersize=3,
                     label="p99 TTFT of the interval's arrivals")
        if es.sla_ttft_ms is not None:
            ax_ttft.axhline(es.sla_ttft_ms, color="tab:red", linestyle="--", linewidth=1,
                            label=f"SLA {es.sla_ttft_ms:g} ms")
        ax_ttft.set_ylabel("p99 TTFT (ms)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel(f"simulated time (s); intervals of {es.interval_ms / 1000.0:g} s")
    fig.suptitle("Workers per pool against load and p99 TTFT")
    return fig
