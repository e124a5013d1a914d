"""Conformance check for runs of passes (servesim.fast.runs): a rank that commits runs must give
exactly what stepping gives. A rank that never runs passes trivially."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servesim.contract import CancelRequest, PassCompletionEffects, Request
from servesim.engine import Engine
from servesim.fast.engine_runs import RunEngine
from servesim.fast.runs import expand
from servesim.testing.driver import DriveResult, drive
from servesim.tokens import Tokens

MakeEngine = Callable[[], Engine]


def runs_workload(prompt_len: int, num_requests: int) -> list[tuple[float, Request]]:
    """Longer outputs and sparser arrivals than the default workload, so runs happen."""
    shared = list(range(1000, 1000 + prompt_len // 2))
    out = []
    for i in range(num_requests):
        tail = [30_000 + 101 * i + k for k in range(prompt_len - len(shared) + (i % 3))]
        out.append((i * 23.0, Request(i, Tokens(shared + tail), 5 + (i * 11) % 40)))
    return out


def _per_pass(result: DriveResult) -> dict[int, PassCompletionEffects]:
    out = {c.pass_id: c.by_rank[0].effects for c in result.completions}
    for run in result.runs:
        for j, eff in enumerate(expand(run.effects)):
            out[run.first_pass_id + j] = eff
    return out


def _key(eff: PassCompletionEffects) -> tuple[Any, ...]:
    o = eff.outputs
    return (o.token_request_ids, o.completed, o.rejected, o.cached_tokens, eff.kv_events,
            eff.metrics, eff.forward_pass_metrics, eff.lifecycle_events)


def check_runs_match_stepping(make_engine: MakeEngine, options: Any) -> list[str]:
    """Drive one workload (with a cancel that may land inside a run) pass by pass and with
    runs: per-request token times, completions and cached tokens, command effects, and
    every pass's outputs, KV events, metrics and forward-pass metrics must be identical."""
    work = runs_workload(options.prompt_len, options.num_requests)
    cancels = [(101.0, 0, CancelRequest(1, discard_pending_output=True))]
    step = drive(make_engine(), work, extra_commands=cancels, runs=False,
                 max_passes=options.max_passes)
    run = drive(RunEngine.over(make_engine()), work, extra_commands=cancels, runs=True,
                max_passes=options.max_passes)
    problems = []
    if step.end_ms != run.end_ms:
        problems.append(f"runs end at {run.end_ms} ms, stepping at {step.end_ms} ms")
    for rid, a in step.requests.items():
        b = run.requests[rid]
        if (a.token_times, a.completed_ms, a.rejected, a.cached_tokens) != (
                b.token_times, b.completed_ms, b.rejected, b.cached_tokens):
            problems.append(f"request {rid}: runs give {b.token_times} / {b.completed_ms}, "
                            f"stepping {a.token_times} / {a.completed_ms}")
    if step.command_effects != run.command_effects:
        problems.append("command effects differ between runs and stepping")
    a_passes, b_passes = _per_pass(step), _per_pass(run)
    if sorted(a_passes) != sorted(b_passes):
        problems.append("runs consume different pass ids than stepping")
    else:
        bad = [p for p in a_passes if _key(a_passes[p]) != _key(b_passes[p])]
        if bad:
            problems.append(f"pass effects differ at passes {bad[:5]}")
    return problems


__all__ = ["check_runs_match_stepping", "runs_workload"]
