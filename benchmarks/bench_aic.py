#!/usr/bin/env python3
"""Wall time of one replay priced by ``aic`` beside the same replay priced by ``polynomial``.

    python benchmarks/bench_aic.py [-n 10000] [--backend vllm] [--model Qwen/Qwen3-32B]
                                   [--system h200_sxm] [--workers 4] [--rate 12] [--repeat 3]

Both runs replay one seeded synthetic workload on the same cluster; the AIC run's engine spec
is compiled (and cached on disk) before timing, so the figure is the per-pass cost. The two
timings schedule differently (different pass lengths give different batches), so the pass
counts are printed too: the per-pass ratio is the cost the model adds.
"""

from __future__ import annotations

import argparse
import time

from servesim.config.loader import load_config
from servesim.replay.runner import simulate


def _sets(a: argparse.Namespace, timing: str) -> list[str]:
    return [
        f"engine.backend={a.backend}", "engine.num_gpu_blocks=4000", f"cluster.workers={a.workers}",
        f"workload.synthetic={{num_requests: {a.n}, rate: {a.rate}, input_length: 'uniform:256:2048', "
        "output_length: 'uniform:32:256'}",
        f"engine.timing_model={timing}",
    ]


def _best(a: argparse.Namespace, timing: str) -> tuple[float, int, dict]:
    loaded = load_config(None, _sets(a, timing))
    loaded.timing_model()
    best = None
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        res = simulate(load_config(None, _sets(a, timing)))
        wall = time.perf_counter() - t0
        if best is None or wall < best[0]:
            best = (wall, res.passes, res.report)
    assert best is not None
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10_000)
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--model", default="Qwen/Qwen3-32B")
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=12.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    t0 = time.perf_counter()
    aic = f"{{type: aic, model: {a.model}, system: {a.system}}}"
    load_config(None, _sets(a, aic)).timing_model().engine  # compile (or read the cached spec)
    setup = time.perf_counter() - t0
    rows = [("polynomial", *_best(a, "{type: polynomial}")), ("aic", *_best(a, aic))]
    print(f"{a.n} requests, {a.workers} x {a.backend} workers; aic engine ready in {setup:.2f} s")
    print(f"{'timing':<12}{'wall s':>9}{'passes':>10}{'us/pass':>9}{'mean TTFT':>11}{'mean TPOT':>11}")
    for name, wall, passes, rep in rows:
        print(f"{name:<12}{wall:>9.2f}{passes:>10}{1e6 * wall / passes:>9.1f}"
              f"{rep['mean_ttft_ms']:>11.2f}{rep['mean_tpot_ms']:>11.2f}")
    print(f"aic / polynomial wall time: {rows[1][1] / rows[0][1]:.2f}x")


if __name__ == "__main__":
    main()
