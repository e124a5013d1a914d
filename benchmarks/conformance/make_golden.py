"""Regenerate ``tests/golden/vllm_oracle/<scenario>/`` from the vLLM oracle.

    python benchmarks/conformance/make_golden.py [--only NAME ...]
    python benchmarks/conformance/make_golden.py --engine sglang   # tests/golden/sglang_oracle
    python benchmarks/conformance/make_golden.py --lora   # tests/golden/vllm_lora_oracle
    python benchmarks/conformance/make_golden.py --engine sglang-priority   # ..._prio

Writes per scenario: ``trace.jsonl`` (the generated trace), ``options.json`` (the oracle
settings, vLLM version and the oracle's summary) and ``steps.jsonl`` (the oracle's step lines,
cut to the compared fields). Needs the oracle venv; CI only reads the files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle import DEFAULT_PYTHON, VLLM033_PYTHON, oracle_available, run_oracle_batch  # noqa: E402
from scenarios import GOLDEN, GOLDEN_033  # noqa: E402
from servesim_vllm.conformance import make_trace, write_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "tests" / "golden" / "vllm_oracle"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--engine", choices=["vllm", "sglang", "sglang-priority"], default="vllm",
                   help="sglang-priority: SGLang's priority scheduling, into "
                        "tests/golden/sglang_oracle_prio")
    p.add_argument("--vllm-version", choices=["0.32", "0.33"], default="0.32",
                   help="0.33: the vLLM 0.33 oracle venv and the cadence scenarios, into "
                        "tests/golden/vllm033_oracle")
    p.add_argument("--lora", action="store_true",
                   help="the LoRA scenarios (lora_scenarios.py), into tests/golden/vllm_lora_oracle")
    a = p.parse_args(argv)
    if a.engine in ("sglang", "sglang-priority"):
        return _sglang(a)
    python = DEFAULT_PYTHON
    golden = GOLDEN
    if a.vllm_version == "0.33":
        python, golden = VLLM033_PYTHON, GOLDEN_033
        a.out = a.out or ROOT.parent / "vllm033_oracle"
    if a.lora:
        from lora_scenarios import GOLDEN_LORA

        golden = GOLDEN_LORA
        a.out = a.out or ROOT.parent / "vllm_lora_oracle"
    a.out = a.out or ROOT
    if not oracle_available(python=python):
        print("the vLLM oracle venv is not installed (setup_vllm_oracle.sh)", file=sys.stderr)
        return 2
    specs = [s for s in golden if not a.only or s.name in a.only]
    traces = [make_trace(s) for s in specs]
    results = run_oracle_batch([(rows, s.options) for rows, s in zip(traces, specs, strict=True)],
                               python=python)
    for spec, rows, (steps, summary) in zip(specs, traces, results, strict=True):
        _write(a.out, spec, rows, steps, summary, "vllm_version")
        print(f"{spec.name}: {summary['steps']} steps, {summary['preemptions']} preemptions, "
              f"hit rate {summary['prefix_hit_rate']:.3f}, aborted {len(summary['aborted'])}")
    return 0


def _write(out: Path, spec: Any, rows: list, steps: list, summary: dict, version_key: str) -> None:
    """One golden directory: trace, oracle steps, and the settings with the oracle's summary."""
    d = out / spec.name
    d.mkdir(parents=True, exist_ok=True)
    write_jsonl(d / "trace.jsonl", rows)
    write_jsonl(d / "steps.jsonl", steps)
    meta = {"scenario": spec.name, "note": spec.note, "oracle": spec.options.to_json(),
            version_key: summary.get(version_key), "summary": summary}
    (d / "options.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def _sglang(a: argparse.Namespace) -> int:
    import sglang_run
    from sglang_scenarios import GOLDEN as SGLANG_GOLDEN
    from sglang_scenarios import PRIORITY

    if not sglang_run.oracle_available():
        print("the SGLang oracle venv is not installed (setup_sglang_oracle.sh)", file=sys.stderr)
        return 2
    out = a.out or sglang_run.GOLDEN_ROOT
    if a.engine == "sglang-priority":
        SGLANG_GOLDEN, out = PRIORITY, a.out or sglang_run.PRIO_GOLDEN_ROOT
    specs = [s for s in SGLANG_GOLDEN if not a.only or s.name in a.only]
    traces = [make_trace(s) for s in specs]
    results = sglang_run.run_oracle([(rows, s.options) for rows, s in zip(traces, specs, strict=True)])
    for spec, rows, (steps, summary) in zip(specs, traces, results, strict=True):
        _write(out, spec, rows, steps, summary, "sglang_version")
        print(f"{spec.name}: {summary['steps']} steps, {summary['retractions']} retractions, "
              f"hit rate {summary['prefix_hit_rate']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
