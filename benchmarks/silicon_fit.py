#!/usr/bin/env python3
"""Fit the ``overhead`` model's per-step CPU constants on half of the silicon models.

    python benchmarks/silicon_fit.py silicon-out/rows.csv [--by-system]

Reads a ``benchmarks/silicon.py`` run made with the ``overhead`` model's CPU terms at zero
(``--timing '{type: overhead, step_ms: 0, per_request_ms: 0}'``) and, per backend, fits
``step_ms`` and ``per_request_ms`` to the mean TPOT of the agg rows whose model is in the
fitting half (``silicon_rows.model_halves``): a decode step of ``b`` requests costs ``step_ms +
per_request_ms * b`` of CPU time, added to the GPU time where the engine runs the two one
after the other (vLLM) and overlapped with it otherwise (``max``; SGLang, TRT-LLM). The
batch is the client's concurrency. ``--by-system`` fits each (backend, system) on its own:
the calibration a deployment gets from its own measurements. Prints the constants, and the TPOT MAPE before and after
on both halves (the held-out figure is the one to quote; a replay with the constants is the
check).
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

SERIAL = {"vllm": True, "sglang": False, "trtllm": False}


def main(path: str, by_system: bool = False) -> int:
    with open(path, encoding="utf-8") as fh:
        raw = [r for r in csv.DictReader(fh) if r["mode"] == "agg" and r["servesim_tpot_ms"]]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import silicon_rows

    fit_models, held_models = silicon_rows.model_halves(silicon_rows.load_rows())
    print("fitting half:", ", ".join(sorted(fit_models)))
    print("held-out half:", ", ".join(sorted(held_models)))
    from servesim_overhead.fit import Sample, fit_terms, mape, moved

    by: dict[str, list[tuple[str, Sample]]] = defaultdict(list)
    for r in raw:
        by[f'{r["backend"]}/{r["system"]}' if by_system else r["backend"]].append((r["model"], Sample(float(r["servesim_tpot_ms"]), float(r["measured_tpot_ms"]),
                                                    int(r["concurrency"]))))
    for backend, rows in sorted(by.items()):
        serial = SERIAL.get(backend.split("/")[0], True)
        if not [m for m, _ in rows if m in fit_models]:
            continue
        fit_rows = [s for m, s in rows if m in fit_models]
        held = [s for m, s in rows if m in held_models]
        step, per = fit_terms(fit_rows, overlap=not serial)
        before = [mape([(s.predicted_tpot_ms, s.measured_tpot_ms) for s in part]) for part in (fit_rows, held)]
        after = [mape([(moved(s, step, per, not serial), s.measured_tpot_ms) for s in part])
                 for part in (fit_rows, held)]
        print(f"{backend}: step_ms={step:.2f} per_request_ms={per:.3f} ({'serial' if serial else 'overlapped'}); "
              f"TPOT MAPE fit {before[0]:.1f}% -> {after[0]:.1f}% ({len(fit_rows)} rows), "
              f"held-out {before[1]:.1f}% -> {after[1]:.1f}% ({len(held)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], "--by-system" in sys.argv[2:]))
