"""Step-by-step conformance of servesim's ``sglang`` rank against SGLang's real scheduler.

The oracle (``sglang_sched_trace.py``: SGLang 0.5.23's ``Scheduler`` on a CPU with a stub model)
replays a Mooncake-style trace and writes one JSON line per event-loop iteration. servesim's
``sglang`` rank writes the same fields into its pass log (``ScheduleRecord.engine_fields``).
This module holds what the golden test and ``benchmarks/conformance/run.py`` share, so CI never
needs SGLang: the oracle's settings (:class:`SglangOracleOptions`, mapped to its argv and to
servesim's ``engine:`` settings), the driver (:func:`run_servesim`) and the comparison
(:func:`compare_steps`). Traces and prompts are those of :mod:`servesim_vllm.conformance`
(the two oracles build prompts with the same scheme).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen
from servesim.config.engine import EngineConfig, SchedulingPolicy
from servesim.contract import Request, ScheduleRecord
from servesim.engine import Engine
from servesim.errors import EngineError
from servesim.factory import EngineFactory
from servesim.rank import Rank
from servesim.replay.passlog import make_line
from servesim.testing import oracle_steps
from servesim.testing.oracle_steps import Comparison, drive_steps, read_jsonl
from servesim.timing.builtin import FixedTiming
from servesim.tokens import Tokens

#: Fields of an oracle step line that servesim reproduces and the comparison checks.
COMPARED_FIELDS = (
    "mode",
    "prefill",
    "decode",
    "new_hits",
    "resumed",
    "chunked",
    "retracted",
    "finished",
    "running",
    "running_batch",
    "waiting",
    "extend_tokens",
    "free_tokens",
    "evictable_tokens",
    "protected_tokens",
    "new_token_ratio",
)
#: What the golden files keep of each oracle line.
KEPT_FIELDS = ("step", "admitted", *COMPARED_FIELDS)
_ORDERED = ("prefill", "decode")  # batch order matters
_ID_SETS = ("retracted", "finished")
_HIT_MAPS = ("new_hits", "resumed")
_VOCAB = 32000  # the oracle's tiny Llama config (vocab_size, eos_token_id)
_EOS = 2


@frozen(kw_only=True)
class SglangOracleOptions:
    """The oracle's settings; defaults are the oracle script's own, except the pool size
    (required there) and the hash block (64 tokens, as in the vLLM goldens)."""

    page_size: int = 1
    max_total_tokens: int = 8192
    max_running_requests: int = 256
    chunked_prefill_size: int = 8192  # <= 0: chunked prefill off
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    ignore_eos: bool = True
    overlap: bool = False
    disable_radix_cache: bool = False
    hash_block_tokens: int = 64
    admit: str = "all"
    per_step: int = 1
    seed: int = 0
    # SGLang's --enable-priority-scheduling (the oracle through
    # benchmarks/conformance/sglang_prio_trace.py; each trace line's ``priority``).
    priority: bool = False
    low_priority_values_first: bool = False
    preemption_threshold: int = 10
    disable_priority_preemption: bool = False
    # SGLang's --enable-mixed-chunk (engine.sglang.enable_mixed_chunk)
    enable_mixed_chunk: bool = False

    def argv(self) -> list[str]:
        """Command-line arguments of ``sglang_sched_trace.py`` (besides trace and --out)."""
        args = [
            f"--page-size={self.page_size}",
            f"--max-total-tokens={self.max_total_tokens}",
            f"--max-running-requests={self.max_running_requests}",
            f"--chunked-prefill-size={self.chunked_prefill_size}",
            f"--max-prefill-tokens={self.max_prefill_tokens}",
            f"--schedule-policy={self.schedule_policy}",
            "--ignore-eos" if self.ignore_eos else "--no-ignore-eos",
            f"--hash-block-tokens={self.hash_block_tokens}",
            f"--admit={self.admit}",
            f"--per-step={self.per_step}",
            f"--seed={self.seed}",
        ]
        if self.overlap:
            args.append("--overlap")
        if self.disable_radix_cache:
            args.append("--disable-radix-cache")
        if self.enable_mixed_chunk:
            args.append("--enable-mixed-chunk")
        if self.priority:
            args.append(f"--preemption-threshold={self.preemption_threshold}")
            if self.low_priority_values_first:
                args.append("--low-priority-values-first")
            if self.disable_priority_preemption:
                args.append("--disable-priority-preemption")
        return args

    def backend_settings(self) -> dict[str, Any]:
        """``engine.sglang:`` keys these options imply (beyond the profile)."""
        out: dict[str, Any] = {
            "schedule_policy": self.schedule_policy,
            "max_prefill_tokens": self.max_prefill_tokens,
            "chunked_prefill_size": self.chunked_prefill_size,
        }
        if not self.ignore_eos:
            out["ignore_eos_reserves_full_output"] = False
        # the oracle's loop, named either way (the sglang-0.5.23 profile has SGLang's default,
        # the overlap loop on)
        out["overlap_schedule"] = self.overlap
        # the oracle puts each step's requests into that step's read (behaviour.py,
        # overlap_read_lag): no arrival time says so
        out["overlap_read_lag"] = False
        if self.enable_mixed_chunk:
            out["enable_mixed_chunk"] = True
        if self.priority:
            out["schedule_low_priority_values_first"] = self.low_priority_values_first
            out["priority_scheduling_preemption_threshold"] = self.preemption_threshold
            out["disable_priority_preemption"] = self.disable_priority_preemption
        return out

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SglangOracleOptions:
        return cls(**data)

    def engine_config(self) -> EngineConfig:
        """servesim ``engine:`` settings equal to these oracle settings (pool in pages)."""
        return EngineConfig(
            backend="sglang",
            num_gpu_blocks=self.max_total_tokens // self.page_size,
            block_size=self.page_size,
            max_num_seqs=self.max_running_requests,
            enable_prefix_caching=not self.disable_radix_cache,
            scheduling_policy=SchedulingPolicy.PRIORITY if self.priority else SchedulingPolicy.FCFS,
        )


# --------------------------------------------------------------------------- servesim side


def schedule_step(step: int, admitted: list[str], rec: ScheduleRecord | None) -> dict[str, Any]:
    """An oracle-shaped step dict from one pass's record (the pass-log line's fields)."""
    if rec is None:
        raise EngineError("the rank did not fill PassCompletionEffects.schedule (record_schedule)")
    line = make_line(0, 0, step, 0.0, 0.0, rec).to_json()
    return {"step": step, "admitted": admitted, **{k: line[k] for k in COMPARED_FIELDS if k in line}}


def build_engine(
    rank_class: type[Rank],
    options: SglangOracleOptions,
    backend_settings: dict[str, Any] | None = None,
) -> Engine:
    """One single-rank engine with the oracle's settings, recording its schedule.

    ``backend_settings`` are ``engine.sglang:`` keys (``{"profile": "sglang-0.5.23"}``),
    applied after the options' own keys. Durations come from a fixed timing model.
    """
    settings = {**options.backend_settings(), **(backend_settings or {})}
    assert rank_class.config_class is not None
    factory = EngineFactory(
        options.engine_config(),
        rank_class,
        FixedTiming(),
        backend_config=rank_class.config_class(**settings),
        emit_forward_pass_metrics=False,
        record_schedule=True,
    )
    return factory.build(0)


def run_servesim(
    engine: Engine,
    rows: Sequence[dict[str, Any]],
    options: SglangOracleOptions,
    *,
    max_steps: int = 200_000,
) -> list[dict[str, Any]]:
    """Drive ``engine`` as the oracle drives SGLang: requests in trace order, all before step
    0 (``admit: all``) or ``per_step`` before each step; stop once drained."""
    prompts = oracle_prompts(rows, options.hash_block_tokens, options.seed)
    reqs = []
    for i, (p, r) in enumerate(zip(prompts, rows, strict=True)):
        n = max(1, int(r["output_length"]))
        reqs.append(Request(request_id=i, prompt=p, max_output_tokens=n,
                            output_token_ids=oracle_outputs(i, n, options.ignore_eos),
                            priority=int(r.get("priority", 0)) if options.priority else 0))
    return drive_steps(engine, reqs, options.admit, options.per_step, schedule_step, max_steps=max_steps)


def oracle_prompts(rows: Sequence[dict[str, Any]], hash_block_tokens: int, seed: int = 0) -> list[Tokens]:
    """The oracle's own prompt tokens (``sglang_sched_trace.PromptBuilder``): a radix tree
    with page size 1 matches single tokens, so unrelated prompts share a first token by
    chance, and only the same token values give the same chance hits."""
    import numpy as np

    blocks: dict[int, list[int]] = {}
    out = []
    for idx, row in enumerate(rows):
        n = int(row["input_length"])
        toks: list[int] = []
        for h in row.get("hash_ids") or []:
            if len(toks) >= n:
                break
            if h not in blocks:
                rng = np.random.default_rng([seed, 1, int(h)])
                blocks[h] = rng.integers(3, _VOCAB, hash_block_tokens).tolist()
            toks.extend(blocks[h])
        if len(toks) < n:
            toks.extend(np.random.default_rng([seed, 2, idx]).integers(3, _VOCAB, n - len(toks)).tolist())
        out.append(Tokens(toks[:n]))
    return out


def oracle_outputs(rid: int, n: int, ignore_eos: bool) -> tuple[int, ...]:
    """The oracle's stub model's tokens (``FakeTpWorker.forward_batch_generation``), EOS last
    when ``ignore_eos`` is off; decoded tokens enter the tree, so their values matter too."""
    toks = [3 + (rid * 7919 + k * 104729) % (_VOCAB - 3) for k in range(n)]
    if not ignore_eos:
        toks[-1] = _EOS
    return tuple(toks)


# --------------------------------------------------------------------------- comparison


def normalize(step: dict[str, Any]) -> dict[str, Any]:
    """The compared view of a step line: batch order kept, id sets sorted numerically."""
    out: dict[str, Any] = {}
    for k in COMPARED_FIELDS:
        v = step.get(k)
        if k in _ORDERED:
            v = list(v.items()) if isinstance(v, dict) else list(v or [])
        elif k in _HIT_MAPS:
            v = sorted((v or {}).items(), key=lambda kv: int(kv[0]))
        elif k in _ID_SETS:
            v = sorted(v or [], key=int)
        out[k] = v
    return out


def compare_steps(
    oracle: Sequence[dict[str, Any]],
    servesim: Sequence[dict[str, Any]],
    *,
    fields: Sequence[str] = COMPARED_FIELDS,
) -> Comparison:
    """Step-for-step comparison; a step missing on one side counts as a divergence."""
    return oracle_steps.compare_steps(oracle, servesim, fields=fields, view=normalize,
                                          shown=COMPARED_FIELDS)


def load_golden(path: Path) -> tuple[list[dict[str, Any]], SglangOracleOptions, list[dict[str, Any]]]:
    """``(trace rows, oracle options, oracle steps)`` of one golden scenario directory."""
    rows = read_jsonl(path / "trace.jsonl")
    meta = json.loads((path / "options.json").read_text())
    return rows, SglangOracleOptions.from_json(meta["oracle"]), read_jsonl(path / "steps.jsonl")
