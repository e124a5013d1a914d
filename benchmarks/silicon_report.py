"""Error tables and scatter plots of a silicon replay's per-row results.

    python benchmarks/silicon_report.py silicon-out/rows.csv [--out DIR] [--title TEXT]
        [--same-rows-as other/rows.csv]

re-prints the tables and redraws the plots of a finished run (``--same-rows-as``: over the
rows another run replayed, to compare two timing models on the same rows).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

PREDICTORS = ("servesim", "aic")


def _err(pred: Any, meas: float) -> float | None:
    try:
        p = float(pred)
    except (TypeError, ValueError):
        return None
    return (p - meas) / meas if math.isfinite(p) and meas > 0 else None


def table(results: list[dict[str, Any]], key: str = "group") -> list[dict[str, Any]]:
    """Per group (and ``all``): rows, and for each predictor and metric the MAPE and signed
    mean error (bias) in percent over the rows it predicted."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        groups[r[key]].append(r)
        groups["all"].append(r)
    out = []
    for name in sorted(groups, key=lambda g: (g == "all", g)):
        rows = groups[name]
        line: dict[str, Any] = {key: name, "rows": len(rows)}
        for who in PREDICTORS:
            for metric in ("ttft", "tpot"):
                errs = [e for r in rows if (e := _err(r.get(f"{who}_{metric}_ms"), float(r[f"measured_{metric}_ms"])))
                        is not None]
                line[f"{who}_{metric}_n"] = len(errs)
                line[f"{who}_{metric}_mape"] = 100 * sum(map(abs, errs)) / len(errs) if errs else None
                line[f"{who}_{metric}_bias"] = 100 * sum(errs) / len(errs) if errs else None
        out.append(line)
    return out


def format_table(lines: list[dict[str, Any]], key: str = "group") -> str:
    def pct(v: Any) -> str:
        return "-" if v is None else f"{v:6.1f}"

    head = (f"{key:<28} {'rows':>5} | {'servesim TTFT':>15} {'TPOT':>15} | {'aiconfigurator TTFT':>19} "
            f"{'TPOT':>15}")
    sub = f"{'':<28} {'':>5} | {'MAPE':>7} {'bias':>7} {'MAPE':>7} {'bias':>7} | {'MAPE':>9} {'bias':>9} " \
          f"{'MAPE':>7} {'bias':>7}"
    out = [head, sub]
    for ln in lines:
        out.append(
            f"{ln[key]:<28} {ln['rows']:>5} | {pct(ln['servesim_ttft_mape']):>7} {pct(ln['servesim_ttft_bias']):>7} "
            f"{pct(ln['servesim_tpot_mape']):>7} {pct(ln['servesim_tpot_bias']):>7} | "
            f"{pct(ln['aic_ttft_mape']):>9} {pct(ln['aic_ttft_bias']):>9} {pct(ln['aic_tpot_mape']):>7} "
            f"{pct(ln['aic_tpot_bias']):>7}")
    return "\n".join(out)


def markdown_table(lines: list[dict[str, Any]], key: str = "group") -> str:
    def pct(v: Any) -> str:
        return "–" if v is None else f"{v:.1f}"

    out = [f"| {key} | rows | servesim TTFT MAPE | bias | servesim TPOT MAPE | bias | "
           "aiconfigurator TTFT MAPE | bias | aiconfigurator TPOT MAPE | bias |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ln in lines:
        cells = [ln[key], str(ln["rows"])] + [pct(ln[f"{w}_{m}_{s}"]) for w in PREDICTORS
                                               for m in ("ttft", "tpot") for s in ("mape", "bias")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def scatter(results: list[dict[str, Any]], path: str, title: str = "") -> None:
    """Predicted against measured mean TTFT and TPOT (log axes), servesim and aiconfigurator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), dpi=90)
    for ax, metric, label in ((axes[0], "ttft", "mean TTFT (ms)"), (axes[1], "tpot", "mean TPOT (ms)")):
        lo, hi = math.inf, 0.0
        for who, colour, name in (("aic", "tab:orange", "aiconfigurator"), ("servesim", "tab:blue", "servesim")):
            pts = [(float(r[f"measured_{metric}_ms"]), float(r[f"{who}_{metric}_ms"])) for r in results
                   if _err(r.get(f"{who}_{metric}_ms"), float(r[f"measured_{metric}_ms"])) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
            ax.scatter(xs, ys, s=9, alpha=0.6, color=colour, label=f"{name} ({len(pts)})")
        if hi > 0:
            ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
            ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="grey", alpha=0.12)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.legend(fontsize=8)
    fig.suptitle(title or "predicted vs measured (band: ±20 %)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summarize(results: list[dict[str, Any]], out: Any, n_expr: int | None = None, n_all: int | None = None,
              title: str = "") -> None:
    """Print the tables (by backend x system x mode, by backend, by model half, by data source)
    and write
    ``summary.md`` and ``scatter.png`` under ``out``."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    failed = [r for r in results if r.get("servesim_problem")]
    # every figure is over the rows servesim priced, the peer's over those it also estimated
    priced = [r for r in results if not r.get("servesim_problem")]
    tables = [(table(priced, key=k), k) for k in ("group", "backend", "half", "source")
              if all(k in r for r in results)]
    for lines, key in tables:
        print(format_table(lines, key=key))
    print(f"replayed {len(results) - len(failed)}/{len(results)} selected rows ({len(failed)} could not be "
          "priced or built: see servesim_problem)" + (f"; expressible {n_expr}/{n_all}" if n_all else ""))
    (out / "summary.md").write_text("\n\n".join(markdown_table(t, key=k) for t, k in tables) + "\n")
    scatter(priced, str(out / "scatter.png"), title)


def main() -> int:
    import argparse
    import csv
    import sys
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows")
    ap.add_argument("--out")
    ap.add_argument("--title", default="")
    ap.add_argument("--same-rows-as", metavar="ROWS.csv", help="keep only the rows another run replayed")
    a = ap.parse_args()
    with open(a.rows, encoding="utf-8") as fh:
        results = list(csv.DictReader(fh))
    if a.same_rows_as:
        with open(a.same_rows_as, encoding="utf-8") as fh:
            keep = {r["id"] for r in csv.DictReader(fh)}
        results = [r for r in results if r["id"] in keep]
    if results and "half" not in results[0]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import silicon_rows

        fit, _ = silicon_rows.model_halves(silicon_rows.load_rows())
        for r in results:
            r["half"] = "fit" if r["model"] in fit else "held"
    summarize(results, a.out or str(Path(a.rows).parent), title=a.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
