"""Running the vLLM scheduler oracle (``vllm_sched_trace.py``) from its own virtual env.

vLLM is never a dependency of servesim or its CI: the oracle lives in a separate venv
(``setup_vllm_oracle.sh``), and its step logs are checked in under ``tests/golden/vllm_oracle``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from servesim_vllm.conformance import KEPT_FIELDS, OracleOptions, read_jsonl, write_jsonl

DEFAULT_PYTHON = Path.home() / ".cache" / "servesim-vllm-oracle" / "bin" / "python"
TOOLS = Path(os.environ.get("SERVESIM_SHARED", "/work/shared")) / "tools"
DEFAULT_SCRIPT = TOOLS / "vllm_sched_trace.py"
#: SGLang 0.5.23's scheduler (``setup_sglang_oracle.sh``) and vLLM 0.33's (``setup_vllm033_oracle.sh``).
SGLANG_PYTHON = Path.home() / ".cache" / "servesim-sglang-oracle" / "bin" / "python"
SGLANG_SCRIPT = TOOLS / "sglang_sched_trace.py"
VLLM033_PYTHON = Path.home() / ".cache" / "servesim-vllm033-oracle" / "bin" / "python"


def oracle_available(python: Path = DEFAULT_PYTHON, script: Path = DEFAULT_SCRIPT) -> bool:
    return python.is_file() and script.is_file()


def run_oracle(
    rows: list[dict[str, Any]],
    options: OracleOptions,
    *,
    python: Path = DEFAULT_PYTHON,
    script: Path = DEFAULT_SCRIPT,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(compact step lines, summary without per_request)`` of one oracle run."""
    with tempfile.TemporaryDirectory(prefix="servesim_oracle_") as tmp:
        d = Path(tmp)
        write_jsonl(d / "trace.jsonl", rows)
        cmd = [str(python), str(script), str(d / "trace.jsonl"), "--out", str(d / "steps.jsonl"),
               "--summary", str(d / "summary.json"), *options.argv()]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"oracle failed ({proc.returncode}): {proc.stderr[-2000:]}")
        steps = [{k: s[k] for k in KEPT_FIELDS} for s in read_jsonl(d / "steps.jsonl")]
        summary = json.loads((d / "summary.json").read_text())
    summary.pop("per_request", None)
    summary.pop("timing_s", None)
    summary.pop("steps_per_s", None)
    return steps, summary


def run_oracle_batch(
    jobs: list[tuple[list[dict[str, Any]], OracleOptions]],
    *,
    python: Path = DEFAULT_PYTHON,
    script: Path = DEFAULT_SCRIPT,
    kept: tuple[str, ...] = KEPT_FIELDS,
) -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Like :func:`run_oracle` for many scenarios, in one oracle process (the engine imported
    once); ``kept`` are the step fields kept (the SGLang oracle's differ from vLLM's)."""
    helper = Path(__file__).resolve().parent / "oracle_batch.py"
    with tempfile.TemporaryDirectory(prefix="servesim_oracle_") as tmp:
        d = Path(tmp)
        argvs = []
        for i, (rows, options) in enumerate(jobs):
            write_jsonl(d / f"trace{i}.jsonl", rows)
            argvs.append([str(d / f"trace{i}.jsonl"), "--out", str(d / f"steps{i}.jsonl"),
                          "--summary", str(d / f"summary{i}.json"), *options.argv()])
        (d / "jobs.json").write_text(json.dumps(argvs))
        proc = subprocess.run([str(python), str(helper), str(script), str(d / "jobs.json")],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"oracle batch failed ({proc.returncode}): {proc.stderr[-2000:]}")
        out = []
        for i in range(len(jobs)):
            steps = [{k: s[k] for k in kept} for s in read_jsonl(d / f"steps{i}.jsonl")]
            summary = json.loads((d / f"summary{i}.json").read_text())
            for k in ("per_request", "timing_s", "steps_per_s"):
                summary.pop(k, None)
            out.append((steps, summary))
    return out


def load_saved(root: Path, only: list[str] | None, options_cls: Any) -> list[tuple[str, list, Any, list]]:
    """``(name, rows, options, oracle steps)`` of every scenario a ``--save`` run kept."""
    out = []
    for d in sorted(Path(root).iterdir()):
        if not (d / "oracle_steps.jsonl").is_file() or (only and d.name not in only):
            continue
        opts = options_cls.from_json(json.loads((d / "options.json").read_text()))
        out.append((d.name, read_jsonl(d / "trace.jsonl"), opts, read_jsonl(d / "oracle_steps.jsonl")))
    return out


def save_scenario(root: str, name: str, rows: list, options: Any, oracle_steps: list, mine: list) -> None:
    """Keep both step logs of one scenario (what ``load_saved`` reads back)."""
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    write_jsonl(d / "trace.jsonl", rows)
    write_jsonl(d / "oracle_steps.jsonl", oracle_steps)
    write_jsonl(d / "servesim_steps.jsonl", mine)
    (d / "options.json").write_text(json.dumps(options.to_json(), indent=1, sort_keys=True) + "\n")
