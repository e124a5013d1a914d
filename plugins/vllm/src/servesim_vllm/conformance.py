"""Step-by-step conformance of servesim's ``vllm`` rank against vLLM's real v1 scheduler (issue 9).

The oracle (``vllm_sched_trace.py``, vLLM 0.32 on CPU, no model) replays a Mooncake-style trace
and writes one JSON line per ``schedule()`` call. This module holds everything the golden test
and ``benchmarks/conformance/run.py`` share, so CI never needs vLLM:

* :class:`ScenarioSpec` and :func:`make_trace` — deterministic synthetic traces (burst admission,
  shared prefixes through shared hash ids);
* :class:`OracleOptions` — the oracle's command-line settings, mapped both to its argv and to
  servesim's ``engine:`` settings;
* :func:`prompt_tokens` — servesim prompts with exactly the oracle's block-sharing structure;
* :func:`run_servesim` — drives one engine pass by pass, admitting requests the way the oracle
  does, and returns oracle-shaped step dicts built from each pass's ``ScheduleRecord``;
* :func:`compare_steps` — identical-step count and the first divergence.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import field, frozen
from servesim.config.engine import EngineConfig, SchedulingPolicy
from servesim.contract import Request, ScheduleRecord
from servesim.engine import Engine
from servesim.errors import EngineError
from servesim.factory import EngineFactory
from servesim.rank import Rank
from servesim.replay.passlog import make_line
from servesim.testing.oracle_steps import (
    COMPARED_FIELDS,
    Comparison,
    compare_steps,
    drive_steps,
    golden_dirs,
    normalize,
    read_jsonl,
    write_jsonl,
)
from servesim.timing.builtin import FixedTiming
from servesim.tokens import Tokens

__all__ = [
    "COMPARED_FIELDS",
    "KEPT_FIELDS",
    "Comparison",
    "OracleOptions",
    "PromptFactory",
    "ScenarioSpec",
    "build_engine",
    "compare_steps",
    "drive_steps",
    "golden_dirs",
    "load_golden",
    "make_trace",
    "normalize",
    "prompt_tokens",
    "read_jsonl",
    "run_servesim",
    "schedule_step",
    "write_jsonl",
]

#: What the golden files keep of each oracle line (the rest is vLLM-internal detail).
KEPT_FIELDS = ("step", "admitted", *COMPARED_FIELDS)

_VOCAB = 32000
_UNIQUE_BASE = 1_000_000  # hash ids of unshared blocks start here (group ids stay below)


# --------------------------------------------------------------------------- scenarios


@frozen(kw_only=True)
class OracleOptions:
    """The oracle's settings; defaults are the oracle script's own."""

    block_size: int = 16
    num_gpu_blocks: int = 1000
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    prefix_caching: bool = True
    hash_block_tokens: int = 64
    admit: str = "all"
    per_step: int = 1
    max_model_len: int | None = None
    seed: int = 0
    reserve_full_isl: bool | None = None  # None: vLLM's default (on in 0.32)
    prefill_schedule_interval: int | None = None  # None: vLLM's default (1)
    policy: str = "fcfs"  # SchedulerConfig.policy: fcfs or priority (each row's 'priority')
    max_loras: int | None = None  # None: LoRA off; rows may carry a 'lora' adapter id

    def argv(self) -> list[str]:
        """Command-line arguments of ``vllm_sched_trace.py`` (besides trace and --out)."""
        args = [
            f"--block-size={self.block_size}",
            f"--num-gpu-blocks={self.num_gpu_blocks}",
            f"--max-num-seqs={self.max_num_seqs}",
            f"--max-num-batched-tokens={self.max_num_batched_tokens}",
            "--chunked-prefill" if self.chunked_prefill else "--no-chunked-prefill",
            "--prefix-caching" if self.prefix_caching else "--no-prefix-caching",
            f"--hash-block-tokens={self.hash_block_tokens}",
            f"--admit={self.admit}",
            f"--per-step={self.per_step}",
            f"--seed={self.seed}",
        ]
        if self.max_model_len is not None:
            args.append(f"--max-model-len={self.max_model_len}")
        if self.reserve_full_isl is not None:
            args.append("--reserve-full-isl" if self.reserve_full_isl else "--no-reserve-full-isl")
        if self.prefill_schedule_interval is not None:
            args.append(f"--prefill-schedule-interval={self.prefill_schedule_interval}")
        if self.policy != "fcfs":
            args.append(f"--policy={self.policy}")
        if self.max_loras is not None:
            args.append(f"--max-loras={self.max_loras}")
        return args

    def backend_settings(self) -> dict[str, Any]:
        """``engine.vllm:`` keys these options imply (beyond the profile)."""
        if self.reserve_full_isl is None:
            return {}
        return {"scheduler_reserve_full_isl": self.reserve_full_isl}

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        if self.policy == "fcfs":
            del data["policy"]  # as the options of scenarios recorded before the setting
        if self.max_loras is None:
            del data["max_loras"]  # scenarios without LoRA keep their options files
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OracleOptions:
        return cls(**data)

    def engine_config(self, trace: Sequence[dict[str, Any]]) -> EngineConfig:
        """servesim ``engine:`` settings equal to these oracle settings.

        The oracle's default ``max_model_len`` is the longest prompt+output in the trace; the
        pool size is passed through unchanged (vLLM's null block is a ``vllm-0.32`` behaviour
        setting of the rank, not a smaller pool, so the same YAML means the same GPU).
        """
        mml = self.max_model_len
        if mml is None:
            mml = max(int(r["input_length"]) + max(1, int(r["output_length"])) for r in trace)
        return EngineConfig(
            backend="vllm",
            num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size,
            max_model_len=mml,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_prefix_caching=self.prefix_caching,
            enable_chunked_prefill=self.chunked_prefill,
            prefill_schedule_interval=self.prefill_schedule_interval or 1,
            scheduling_policy=SchedulingPolicy(self.policy),
            enable_lora=self.max_loras is not None,
            max_loras=self.max_loras or 1,
        )


@frozen(kw_only=True)
class ScenarioSpec:
    """A synthetic trace: ``n`` requests, lengths uniform in the given inclusive ranges.

    With ``prefix_groups > 0`` a fraction ``prefix_frac`` of requests starts with its group's
    chain of hash ids, ``floor(prefix_ratio * isl / hash_block_tokens)`` blocks long, so
    requests of one group share a prefix as long as the shorter of their two chains.
    """

    name: str
    n: int
    isl: tuple[int, int]
    osl: tuple[int, int]
    prefix_groups: int = 0
    prefix_frac: float = 0.0
    prefix_ratio: float = 0.5
    seed: int = 0
    options: OracleOptions = field(factory=OracleOptions)
    note: str = ""
    # Per-row 'priority' fields: uniform in [0, priority_levels) from their own random stream
    # (the lengths and prefixes stay those of the same spec without priorities), or, with
    # priority_inverted, the row's position from the end (every later row more urgent).
    priority_levels: int = 0
    priority_inverted: bool = False
    # LoRA: a fraction ``lora_frac`` of requests names one of ``loras`` adapters (ids 1..loras,
    # uniform), drawn from a stream of their own so the rest of the trace does not change.
    loras: int = 0
    lora_frac: float = 1.0


def make_trace(spec: ScenarioSpec) -> list[dict[str, Any]]:
    """Deterministic Mooncake-style rows (distinct timestamps, one hash id per hash block)."""
    rng = random.Random(spec.seed)
    hbt = spec.options.hash_block_tokens
    rows: list[dict[str, Any]] = []
    next_unique = _UNIQUE_BASE
    for i in range(spec.n):
        isl = rng.randint(*spec.isl)
        osl = rng.randint(*spec.osl)
        nblocks = math.ceil(isl / hbt)
        ids: list[int] = []
        if spec.prefix_groups > 0 and rng.random() < spec.prefix_frac:
            g = rng.randrange(spec.prefix_groups)
            shared = min(nblocks, int(spec.prefix_ratio * isl) // hbt)
            ids = [g * 10_000 + k for k in range(shared)]
        while len(ids) < nblocks:
            ids.append(next_unique)
            next_unique += 1
        rows.append({"timestamp": i, "input_length": isl, "output_length": osl, "hash_ids": ids})
    if spec.priority_inverted:
        for i, row in enumerate(rows):
            row["priority"] = spec.n - 1 - i
    elif spec.priority_levels > 0:
        prng = random.Random(f"{spec.seed}:priority")
        for row in rows:
            row["priority"] = prng.randrange(spec.priority_levels)
    if spec.loras > 0:
        pick = random.Random(f"{spec.seed}:lora")
        for row in rows:
            if pick.random() < spec.lora_frac:
                row["lora"] = pick.randint(1, spec.loras)
    return rows


# --------------------------------------------------------------------------- prompts


class PromptFactory:
    """Prompts with the oracle's sharing structure (vllm_sched_trace.py ``PromptBuilder``).

    The oracle gives each hash id one fixed block of ``hash_block_tokens`` random tokens, cuts
    the prompt at ``input_length`` and fills any tail beyond the hash ids with tokens unique to
    the request. Which engine blocks two prompts share depends only on where their token
    sequences agree, so servesim need not use the oracle's token values — only the same
    equalities: equal hash ids → equal token runs, everything else distinct.
    """

    def __init__(self, hash_block_tokens: int, seed: int = 0) -> None:
        self.hbt = hash_block_tokens
        self.seed = seed
        self._blocks: dict[int, list[int]] = {}

    def _block(self, h: int) -> list[int]:
        b = self._blocks.get(h)
        if b is None:
            rng = random.Random(f"{self.seed}:block:{h}")
            b = [rng.randrange(3, _VOCAB) for _ in range(self.hbt)]
            self._blocks[h] = b
        return b

    def prompt(self, index: int, row: dict[str, Any]) -> Tokens:
        n = int(row["input_length"])
        toks: list[int] = []
        for h in row.get("hash_ids") or []:
            if len(toks) >= n:
                break
            toks.extend(self._block(int(h)))
        if len(toks) < n:
            rng = random.Random(f"{self.seed}:tail:{index}")
            toks.extend(rng.randrange(3, _VOCAB) for _ in range(n - len(toks)))
        return Tokens(toks[:n])


def prompt_tokens(rows: Sequence[dict[str, Any]], hash_block_tokens: int) -> list[Tokens]:
    pf = PromptFactory(hash_block_tokens)
    return [pf.prompt(i, r) for i, r in enumerate(rows)]


# --------------------------------------------------------------------------- servesim side


def schedule_step(step: int, admitted: list[str], rec: ScheduleRecord | None) -> dict[str, Any]:
    """An oracle-shaped step dict from one pass's record: the pass-log line's fields
    (:func:`servesim.replay.passlog.make_line`, request ids as strings) plus ``step``/``admitted``."""
    if rec is None:
        raise EngineError("the rank did not fill PassCompletionEffects.schedule (record_schedule)")
    line = make_line(0, 0, step, 0.0, 0.0, rec).to_json()
    return {"step": step, "admitted": admitted, **{k: line[k] for k in COMPARED_FIELDS}}


def build_engine(
    rank_class: type[Rank],
    rows: Sequence[dict[str, Any]],
    options: OracleOptions,
    backend_settings: dict[str, Any] | None = None,
) -> Engine:
    """One single-rank engine with the oracle's settings, recording its schedule.

    ``backend_settings`` are the ``engine.vllm:`` keys (e.g. ``{"profile": "vllm-0.32"}``),
    given to the rank class's ``config_class``. Durations come from a fixed timing model: the
    scheduler's choices never depend on them.
    """
    backend = None
    if rank_class.config_class is not None:
        backend = rank_class.config_class(**(backend_settings or {}))
    elif backend_settings:
        raise ValueError(f"{rank_class.__name__} takes no backend settings")
    factory = EngineFactory(
        options.engine_config(rows),
        rank_class,
        FixedTiming(),
        backend_config=backend,
        emit_forward_pass_metrics=False,
        record_schedule=True,
    )
    return factory.build(0)


def run_servesim(
    engine: Engine,
    rows: Sequence[dict[str, Any]],
    options: OracleOptions,
    *,
    max_steps: int = 100_000,
) -> list[dict[str, Any]]:
    """Drive ``engine`` (one rank, built with ``record_schedule=True``) as the oracle drives vLLM.

    Requests are submitted in trace order — all before pass 0 (``admit: all``) or
    ``per_step`` before each pass (``stepwise``) — at simulated time ``now``; the engine's
    durations only move the clock, they never change a schedule. Stops when the engine is
    drained and every request was submitted.
    """
    prompts = prompt_tokens(rows, options.hash_block_tokens)
    mml = options.engine_config(rows).max_model_len
    # The oracle drops rows it could never finish (``skipped_too_long``); ids stay line indices.
    reqs = [
        Request(request_id=i, prompt=p, max_output_tokens=max(1, int(r["output_length"])),
                priority=int(r.get("priority", 0)), lora=int(r.get("lora", 0)))
        for i, (p, r) in enumerate(zip(prompts, rows, strict=True))
        if 1 <= int(r["input_length"]) and mml is not None
        and int(r["input_length"]) + max(1, int(r["output_length"])) <= mml
    ]
    return drive_steps(engine, reqs, options.admit, options.per_step, schedule_step, max_steps=max_steps)


# --------------------------------------------------------------------------- comparison


def load_golden(path: Path) -> tuple[list[dict[str, Any]], OracleOptions, list[dict[str, Any]]]:
    """``(trace rows, oracle options, oracle steps)`` of one golden scenario directory."""
    rows = read_jsonl(path / "trace.jsonl")
    opts = OracleOptions.from_json(json.loads((path / "options.json").read_text())["oracle"])
    return rows, opts, read_jsonl(path / "steps.jsonl")

