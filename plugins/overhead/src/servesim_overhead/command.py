"""``servesim fit-overhead``: fit a deployment's per-step CPU terms to benchmark results.

Each result's load is replayed on the deployment of ``CONFIG.yaml`` (whose timing model is
``overhead``) with ``step_ms`` and ``per_request_ms`` at zero; the terms are fitted to the
measured mean TPOTs of every other result (the first, third, ...; :mod:`servesim_overhead.fit`),
then every result is replayed with them, and the error is reported separately on the results
the terms were fitted on and on the others.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from servesim.errors import UserError


def _replay(config: str | None, sets: list[str], result: Any, tmp: str, step: float, per: float) -> tuple[float, float]:
    import yaml

    from servesim.config.loader import load_config
    from servesim.replay.runner import simulate

    conc = result.client.get("max_concurrency")
    if result.lengths is not None:
        trace = os.path.join(tmp, "trace.jsonl")
        sends = result.send_times_ms if result.send_times_ms is not None else _drawn_send_times(result)
        with open(trace, "w", encoding="utf-8") as fh:
            next_id = 0
            for (n_in, n_out), t in zip(result.lengths, sends, strict=True):
                blocks = -(-n_in // 16)
                fh.write(json.dumps({"timestamp": t, "input_length": n_in, "output_length": n_out,
                                     "hash_ids": list(range(next_id, next_id + blocks))}) + "\n")
                next_id += blocks
        workload = f"workload.trace={{format: mooncake, path: {trace}, trace_block_size: 16}}"
    else:
        client = os.path.join(tmp, "client.yaml")
        with open(client, "w", encoding="utf-8") as fh:
            yaml.safe_dump(result.client, fh)
        workload = f"workload.trace={{format: bench_client, path: {client}}}"
        warmups = int(result.client.get("num_warmups") or 0)
        if warmups:  # the client waited for them (servesim_benchclient.reader)
            sets = [*sets, f"workload.warmup={{requests: {warmups}, wait: true}}"]
    # the client's semaphore: each request waits for a slot from its send time
    run_sets = [*sets, workload, "workload.concurrency=null",
                f"workload.max_concurrency={conc if conc is not None else 'null'}",
                f"engine.timing_model.step_ms={step}", f"engine.timing_model.per_request_ms={per}"]
    loaded = load_config(config, run_sets)
    if loaded.engine.timing_type != "overhead":
        raise UserError("fit-overhead fits the overhead timing model's terms: set engine.timing_model to "
                        "{type: overhead, inner: {...}}")
    report = simulate(loaded).report
    return float(report["mean_ttft_ms"]), float(report["mean_tpot_ms"])


def _drawn_send_times(result: Any) -> list[float]:
    """The send times (ms) of a saved result's requests, drawn as the client drew them from its
    rate, burstiness and seed (servesim_benchclient.draws), for its saved per-request lengths."""
    from servesim.errors import ConfigError
    from servesim_benchclient import config as client_config
    from servesim_benchclient import draws

    assert result.lengths is not None
    try:
        cfg = client_config.build({**result.client, "num_prompts": len(result.lengths)}, result.name)
    except ConfigError as exc:
        raise UserError(f"{result.name}: {exc}") from None
    return draws.send_times_ms(cfg)


def fit_overhead(args: argparse.Namespace) -> int:
    import yaml

    from servesim.config.loader import load_config
    from servesim_overhead import defaults
    from servesim_overhead.fit import Sample, fit_terms, mape
    from servesim_overhead.results import read

    client_defaults: dict[str, Any] = {}
    if args.client:
        try:
            with open(args.client, encoding="utf-8") as fh:
                client_defaults = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UserError(f"{args.client}: cannot read client options: {str(exc).splitlines()[0]}") from None
        if not isinstance(client_defaults, dict):
            raise UserError(f"{args.client}: expected a mapping of client options")
    results = [r for path in args.results for r in read(path, client_defaults)]
    if len(results) < 2:
        raise UserError("fit-overhead needs at least two results (half to fit, half to check)")
    loaded = load_config(args.config, args.sets)
    cfg = loaded.sim.engine
    overlap = loaded.engine.timing_config.overlap if loaded.engine.timing_type == "overhead" else None
    overlap = defaults.for_backend(cfg.backend).overlap if overlap is None else overlap
    zero = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in results:
            zero.append(_replay(args.config, args.sets, r, tmp, 0.0, 0.0))
        samples = [Sample(z[1], r.measured_tpot_ms, int(r.client.get("max_concurrency") or 1))
                   for z, r in zip(zero, results, strict=True)]
        fit_idx = list(range(0, len(results), 2))
        step, per = fit_terms([samples[i] for i in fit_idx], overlap)
        after = [_replay(args.config, args.sets, r, tmp, step, per) for r in results]
    print(f"{'result':<40} {'measured TTFT':>13} {'TPOT':>8} | {'before TTFT':>11} {'TPOT':>8} | "
          f"{'fitted TTFT':>11} {'TPOT':>8}  half")
    for i, (r, z, a) in enumerate(zip(results, zero, after, strict=True)):
        print(f"{r.name[-40:]:<40} {r.measured_ttft_ms:>13.1f} {r.measured_tpot_ms:>8.2f} | {z[0]:>11.1f} "
              f"{z[1]:>8.2f} | {a[0]:>11.1f} {a[1]:>8.2f}  {'fit' if i % 2 == 0 else 'held-out'}")
    for label, idx in (("fitted on", fit_idx), ("held out", list(range(1, len(results), 2)))):
        for metric, k in (("TTFT", 0), ("TPOT", 1)):
            meas = [(results[i].measured_ttft_ms if k == 0 else results[i].measured_tpot_ms) for i in idx]
            print(f"{label:<9} {metric}: MAPE {mape([(zero[i][k], m) for i, m in zip(idx, meas, strict=True)]):.1f}% "
                  f"-> {mape([(after[i][k], m) for i, m in zip(idx, meas, strict=True)]):.1f}% ({len(idx)} results)")
    print(f"engine.timing_model: step_ms: {step:g}, per_request_ms: {per:g}  "
          f"({'overlapped' if overlap else 'serial'} with the GPU)")
    return 0
