#!/usr/bin/env python3
"""Print docs/timing.md's table of AIC-predicted TTFT and ITL (markdown); draw its figures.

    python benchmarks/aic_table.py [--plot DIR]

TTFT is one request's prefill forward (nothing cached); ITL is one decode step of a batch at
a 2048-token context, as the ``aic`` timing model prices them (vLLM, TP 1). ``--plot DIR``
also draws ``DIR/timing-aic.png`` (TTFT against prompt length, ITL against batch size, for
the table's models and systems) and ``DIR/timing-calibration.png``: an ``aic``-timed replay
writes its passes (FPM JSONL), ``servesim calibrate`` fits ``polynomial`` and
``interpolated`` to them, and every pass is priced by each fitted model (as a replay layered
with the fitted file prices it) against its measured time. It prints the fit-error tables
of ``servesim calibrate``. Deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
from typing import Any

from servesim.config.engine import EngineConfig
from servesim_aic.config import AicTimingConfig
from servesim_aic.timing import AicTiming

MODELS = ("meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-32B")
SYSTEMS = ("h100_sxm", "h200_sxm")
PROMPTS = (1024, 8192)
BATCHES = (1, 32, 128)
CONTEXT = 2048
CURVE_PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CURVE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# The measured deployment of the calibration figure: the round trip of the aic plugin's tests.
CALIBRATION = """engine:
  backend: vllm
  num_gpu_blocks: 4000
  timing_model: {type: aic, model: Qwen/Qwen3-32B}
workload:
  synthetic: {num_requests: 120, rate: 3.0, input_length: 'uniform:256:2048', output_length: 'uniform:32:160'}
"""


def _timing(model: str, system: str) -> AicTiming:
    return AicTiming(AicTimingConfig(model=model, system=system), EngineConfig(backend="vllm"))


def rows() -> list[list[str]]:
    out = []
    for model in MODELS:
        for system in SYSTEMS:
            t = _timing(model, system)
            ttft = [t.predict_prefill_ms(1, isl, 0) for isl in PROMPTS]
            itl = [t.predict_decode_ms(b, b * CONTEXT, CONTEXT, 10**7) for b in BATCHES]
            out.append([f"`{model}`", f"`{system}`", *(f"{v:.1f}" for v in ttft + itl)])
    return out


def table() -> str:
    head = ["model", "system", *(f"TTFT {n // 1024}k (ms)" for n in PROMPTS),
            *(f"ITL b={b} (ms)" for b in BATCHES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows()]
    return "\n".join(lines)


def _save(fig: Any, path: str) -> None:
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def curves_figure(path: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=100, layout="constrained")
    ttft_ax, itl_ax = fig.subplots(1, 2)
    for model, color in zip(MODELS, ("tab:blue", "tab:red"), strict=True):
        for system, style in zip(SYSTEMS, ("--", "-"), strict=True):
            t = _timing(model, system)
            label = f"{model.split('/')[-1]} on {system}"
            ttft_ax.plot(CURVE_PROMPTS, [t.predict_prefill_ms(1, n, 0) for n in CURVE_PROMPTS], style,
                         color=color, marker="o", markersize=3, label=label)
            itl_ax.plot(CURVE_BATCHES, [t.predict_decode_ms(b, b * CONTEXT, CONTEXT, 10**7)
                                        for b in CURVE_BATCHES], style, color=color, marker="o",
                        markersize=3, label=label)
    for ax, xs in ((ttft_ax, CURVE_PROMPTS), (itl_ax, CURVE_BATCHES)):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    ttft_ax.set_yscale("log")
    ttft_ax.set(xlabel="prompt length (tokens, nothing cached)", ylabel="TTFT (ms)",
                title="One request's prefill")
    itl_ax.set(xlabel="decode batch size", ylabel="ITL (ms)", title=f"One decode step at a {CONTEXT}-token context")
    itl_ax.legend(fontsize=8)
    fig.suptitle("aic predictions (vLLM, TP 1)")
    _save(fig, path)


def calibrate(workdir: str) -> tuple[list[Any], dict[str, list[float]], str]:
    """The measured passes, each fitted model's price of them, and calibrate's printed tables."""
    import servesim.cli.main as cli
    from servesim.calibrate import price, read_passes
    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    base, fpm = os.path.join(workdir, "base.yaml"), os.path.join(workdir, "fpm.jsonl")
    with open(base, "w", encoding="utf-8") as fh:
        fh.write(CALIBRATION)
    simulate(load_config(base, [f"sinks.fpm=[{{type: jsonl, path: {fpm}}}]"]))
    passes = read_passes(fpm)
    loaded = load_config(base)
    kv_tokens = loaded.sim.engine.num_gpu_blocks * loaded.sim.engine.block_size
    predicted, printed = {}, io.StringIO()
    for model in ("polynomial", "interpolated"):
        fitted = os.path.join(workdir, f"{model}.yaml")
        args = ["calibrate", fpm, "--model", model, "-o", fitted]
        with contextlib.redirect_stdout(printed):
            print(f"$ servesim calibrate fpm.jsonl --model {model}" + (
                f" --kv-tokens {kv_tokens}" if model == "polynomial" else ""))
            if cli.main(args + (["--kv-tokens", str(kv_tokens)] if model == "polynomial" else [])):
                raise SystemExit(f"servesim calibrate --model {model} failed")
        timing = load_config([base, fitted]).timing_model()
        predicted[model] = [price(timing, p, kv_tokens) for p in passes]
    return passes, predicted, printed.getvalue().replace(workdir + os.sep, "")


def calibration_figure(passes: list[Any], predicted: dict[str, list[float]], path: str) -> None:
    """Per fitted model: predicted against measured (log axes) over the error in percent."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.6), dpi=100, layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, height_ratios=(3, 2))
    measured = [p.ms for p in passes]
    lo, hi = min(measured) * 0.8, max(measured) * 1.25
    ticks = [t for t in (10, 20, 50, 100, 200, 500, 1000) if lo <= t <= hi]
    for col, (model, pred) in enumerate(predicted.items()):
        top, bottom = axes[0, col], axes[1, col]
        top.plot([lo, hi], [lo, hi], color="0.5", linewidth=1, label="predicted = measured")
        bottom.axhline(0.0, color="0.5", linewidth=1)
        for kind, color in (("decode", "tab:blue"), ("mixed", "tab:orange"), ("prefill", "tab:green")):
            pts = [(p.ms, y) for p, y in zip(passes, pred, strict=True) if p.kind == kind]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            top.scatter(xs, ys, s=6, color=color, alpha=0.5, label=f"{kind} ({len(pts)} passes)")
            bottom.scatter(xs, [100.0 * (y - x) / x for x, y in pts], s=6, color=color, alpha=0.5)
        top.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"fitted {model}")
        top.set_yticks(ticks, [str(t) for t in ticks])
        bottom.set_xticks(ticks, [str(t) for t in ticks])
        top.minorticks_off()
        bottom.set(xlabel="measured pass time (ms, aic)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        top.legend(fontsize=8, markerscale=2, loc="upper left")
    axes[0, 0].set_ylabel("predicted pass time (ms)")
    axes[1, 0].set_ylabel("error (%)")
    lim = max(abs(v) for v in axes[1, 0].get_ylim() + axes[1, 1].get_ylim())
    for ax in axes[1]:
        ax.set_ylim(-lim, lim)
        ax.minorticks_off()
    fig.suptitle("servesim calibrate: every pass of a Qwen3-32B/H200 replay, priced by the fitted model")
    _save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plot", metavar="DIR", help="also draw the figures of docs/timing.md")
    args = parser.parse_args()
    print(table())
    if args.plot:
        os.makedirs(args.plot, exist_ok=True)
        curves_figure(os.path.join(args.plot, "timing-aic.png"))
        with tempfile.TemporaryDirectory() as workdir:
            passes, predicted, printed = calibrate(workdir)
        print()
        print(printed, end="")
        calibration_figure(passes, predicted, os.path.join(args.plot, "timing-calibration.png"))


if __name__ == "__main__":
    main()
